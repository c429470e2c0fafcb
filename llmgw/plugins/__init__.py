"""llmgw's plugin system (pluggy, project name `llmgw`).

A plugin is a module registered in the `llmgw` entry-point group whose
functions are marked with `hookimpl`:

    from llmgw.plugins import hookimpl
    from llmgw.plugins.types import Engine

    @hookimpl
    def llmgw_engines():
        return [MyEngine()]
"""

import pluggy

PROJECT = "llmgw"
ENTRY_POINT_GROUP = "llmgw"

hookimpl = pluggy.HookimplMarker(PROJECT)
hookspec = pluggy.HookspecMarker(PROJECT)

__all__ = ["PROJECT", "ENTRY_POINT_GROUP", "hookimpl", "hookspec"]
