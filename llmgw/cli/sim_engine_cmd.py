"""`llmgw sim-engine`: run the simulated OpenAI-compatible engine used by tests, demos and benchmarks.

The flags are read off `SimOptions`: each field's metadata names its flag
and says what it does, so the two cannot drift apart.
"""

from __future__ import annotations

import argparse
import os
import sys

import attrs

HELP = "Run the simulated OpenAI-compatible engine used by tests, demos and benchmarks."

# Other spellings a launcher written for vLLM, or for the Go agent, may use.
ALIASES = {"--model": ("--served-model-name",), "--context-length": ("--max-model-len",)}


def register(sub) -> None:
    from llmgw.simengine.options import SimOptions

    parser = sub.add_parser("sim-engine", help=HELP, description=HELP)
    defaults = SimOptions()
    for field in attrs.fields(SimOptions):
        flag, text, metavar = field.metadata["flag"], field.metadata["help"], field.metadata["metavar"]
        names = (flag, *ALIASES.get(flag, ()))
        if field.name == "models":
            parser.add_argument(*names, dest="models", action="append", metavar=metavar,
                                required=True, help=text)
        elif field.name == "lora_modules":  # adapters: repeatable, as vLLM's
            parser.add_argument(*names, dest=field.name, action="append", default=[], metavar=metavar, help=text)
        elif field.type in (bool, "bool"):  # a flag that turns a default-on feature off
            parser.add_argument(*names, dest=field.name, action="store_false", help=text)
        else:
            kind = {"int": int, "float": float}.get(str(field.type), str)
            default = getattr(defaults, field.name)
            shown = "" if field.name == "api_key" else f" (default {default})"
            parser.add_argument(*names, dest=field.name, type=kind, metavar=metavar,
                                default=None if field.name == "api_key" else default,
                                help=text + shown)
    parser.add_argument("--listen", metavar="HOST:PORT",
                        help="--host and --port in one, as the agent passes them")
    parser.set_defaults(handler=run)


def options_from_args(args: argparse.Namespace) -> "SimOptions":
    from llmgw.cli.main import UsageError
    from llmgw.simengine.options import API_KEY_ENV, SimOptions

    values = {f.name: getattr(args, f.name) for f in attrs.fields(SimOptions)}
    if args.listen:
        host, sep, port = args.listen.rpartition(":")
        if not sep or not port.isdigit():
            raise UsageError(f"--listen: expected HOST:PORT, got {args.listen!r}")
        values["host"], values["port"] = host.strip("[]") or "0.0.0.0", int(port)
    if values["api_key"] is None:
        values["api_key"] = next((os.environ[n] for n in API_KEY_ENV if os.environ.get(n)), None)
    try:
        return SimOptions(**values)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def run(args: argparse.Namespace):
    from llmgw.simengine.server import serve

    options = options_from_args(args)

    async def main() -> int:
        try:
            await serve(options)
        except OSError as exc:  # the port is taken, the address is not ours
            print(f"llmgw sim-engine: cannot listen on {options.host}:{options.port}: {exc.strerror or exc}",
                  file=sys.stderr)
            return 1
        return 0

    return main()
