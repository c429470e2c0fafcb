"""`llmgw up`: a whole cluster on one machine, for trying llmgw (docs/up.md).

- `layout`: what `up` keeps in its directory, and the two files it writes there.
- `procs`: the child processes, and stopping them with the engines they leave.
- `run`: the steps, from an empty directory to an answered request and back.
"""

from llmgw.up.run import UpError, UpInfo, UpOptions, run_up

__all__ = ["UpError", "UpInfo", "UpOptions", "run_up"]
