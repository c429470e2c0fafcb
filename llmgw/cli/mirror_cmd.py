"""`llmgw mirror`: keep model files for the whole cluster: serve, add, list, verify, remove, import."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from llmgw.cli.common import add_json_flag, print_json, print_table, usage_of

HELP = "Keep model files for the whole cluster: serve, add, list, verify, remove, import."
DEFAULT_DIR = "/srv/models"


def register(sub) -> None:
    parser = sub.add_parser("mirror", help=HELP, description=HELP)
    parser.set_defaults(handler=usage_of(parser, "mirror"))
    cmds = parser.add_subparsers(dest="mirror_command", metavar="SUBCOMMAND", parser_class=type(parser))

    p = cmds.add_parser("serve", help="serve the files (plain HTTP) and the API (TLS)",
                        description="Serve the mirror directory over HTTP, and its API over TLS.")
    _dir(p)
    p.add_argument("--base", required=True, help="the URL nodes reach the file server at, like http://models.internal:8081")
    p.add_argument("--listen", default=":8081", help="the file server's host:port (default :8081, every interface)")
    p.add_argument("--api-listen", default=":8082", help="the API's host:port (default :8082); empty for none")
    p.add_argument("--tls-cert", default="", help="the API's certificate (PEM)")
    p.add_argument("--tls-key", default="", help="the API's private key (PEM)")
    p.add_argument("--tls-ca", default="", help="require client certificates from this authority (PEM)")
    p.add_argument("--api-client", default="", help="the one client certificate (common name) the API answers")
    _catalog(p)
    _registry(p)
    p.set_defaults(handler=run_serve)

    p = cmds.add_parser("add", help="fetch a registry repository or a URL into the mirror",
                        description="Fetch SOURCE into a new dated version: org/repo[@revision] or an http(s) URL.")
    p.add_argument("source", metavar="SOURCE", help="org/repo[@revision] or an http(s):// URL")
    p.add_argument("--file", dest="files", action="append", default=[], metavar="PATTERN",
                   help="only files matching this pattern (repeatable); a GGUF brings its mmproj projector")
    p.add_argument("--name", help="the model's name in the mirror (default: from the repository or file)")
    p.add_argument("--max-size", default="1TiB", help="refuse a URL larger than this (default 1TiB)")
    _dir(p)
    _registry(p)
    add_json_flag(p)
    p.set_defaults(handler=run_add)

    p = cmds.add_parser("list", help="models, versions, sizes, downloads and who uses them")
    p.add_argument("model", nargs="?", help="only this model")
    _dir(p)
    _catalog(p)
    add_json_flag(p)
    p.set_defaults(handler=run_list)

    p = cmds.add_parser("unused", help="versions no model in the catalog uses")
    _dir(p)
    _catalog(p)
    add_json_flag(p)
    p.set_defaults(handler=run_unused)

    p = cmds.add_parser("remove", help="remove a model or one version (refused while a model uses it)")
    p.add_argument("target", metavar="MODEL[/VERSION]")
    p.add_argument("--force", action="store_true", help="remove it even though a model uses it")
    _dir(p)
    _catalog(p)
    p.set_defaults(handler=run_remove)

    p = cmds.add_parser("verify", help="re-hash files against their sidecars; exit 1 on any mismatch")
    p.add_argument("target", metavar="MODEL[/VERSION]", nargs="?")
    _dir(p)
    add_json_flag(p)
    p.set_defaults(handler=run_verify)

    p = cmds.add_parser("import", help="copy a local file into the mirror as a new version")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--name", required=True, help="the model's name in the mirror")
    _dir(p)
    p.set_defaults(handler=run_import)

    p = cmds.add_parser("import-ollama", help="import an Ollama model's weights and projector, print a definition")
    p.add_argument("model", metavar="MODEL", help="as Ollama names it: llama3.2, llama3.2:3b, namespace/name:tag")
    p.add_argument("--ollama-dir", default="",
                   help="Ollama's models directory (default $OLLAMA_MODELS or ~/.ollama/models)")
    p.add_argument("--name", help="the model's name in the mirror (default: NAME-TAG)")
    p.add_argument("--base", default=os.environ.get("LLMGW_MIRROR_BASE", ""),
                   help="the file server's URL, for the printed source (default $LLMGW_MIRROR_BASE)")
    _dir(p)
    p.set_defaults(handler=run_import_ollama)

    p = cmds.add_parser("check-updates", help="which models' repositories have moved on upstream")
    p.add_argument("model", nargs="?", help="only this model")
    _dir(p)
    _registry(p)
    add_json_flag(p)
    p.set_defaults(handler=run_check_updates)

    p = cmds.add_parser("search", help="search the registry (trending, downloads, likes, newest)")
    p.add_argument("query", nargs="?", default="")
    p.add_argument("--sort", choices=("trending", "downloads", "likes", "newest"), default="trending")
    p.add_argument("--limit", type=int, default=20)
    _dir(p)  # an offline mirror (llmgw mirror offline) searches nothing
    _registry(p)
    add_json_flag(p)
    p.set_defaults(handler=run_search)

    from llmgw.cli import release_cmd  # releases kept in the mirror (llmgw.release)

    release_cmd.register_mirror(cmds, _dir)

    p = cmds.add_parser("offline", help="say, or set, whether this mirror fetches from outside (on, off)",
                        description="With no argument, say whether the mirror is offline. on: refuse every fetch "
                        "from outside (Hugging Face, GitHub, PyPI, any URL) by this mirror's commands and API, as "
                        "`llmgw bundle import` does; off: allow them again. Kept in MIRROR/_llmgw/offline.json.")
    p.add_argument("state", nargs="?", choices=("on", "off"))
    _dir(p)
    p.set_defaults(handler=run_offline)



def _dir(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", default=os.environ.get("LLMGW_MIRROR_DIR", DEFAULT_DIR),
                   help=f"the mirror directory (default $LLMGW_MIRROR_DIR or {DEFAULT_DIR})")


def _catalog(p: argparse.ArgumentParser) -> None:
    p.add_argument("--catalog", default=os.environ.get("LLMGW_MIRROR_CATALOG", ""),
                   help="server.yaml, or a YAML/JSON map of model name to source: what uses which version "
                        "(default $LLMGW_MIRROR_CATALOG)")


def _registry(p: argparse.ArgumentParser) -> None:
    p.add_argument("--registry", default="", help="the registry's URL (default $HF_ENDPOINT or https://huggingface.co)")
    p.add_argument("--allow-private", action="store_true",
                   help="let the registry or a URL be a loopback or private address (a registry inside the network)")


def _offline(args: argparse.Namespace):
    """What says, at each fetch, whether this mirror is offline (llmgw.mirror.offline)."""
    from llmgw.mirror.offline import offline_reason

    directory = getattr(args, "dir", "") or os.environ.get("LLMGW_MIRROR_DIR", DEFAULT_DIR)
    return lambda: offline_reason(directory)


def _fail(command: str, exc: BaseException) -> int:
    print(f"llmgw mirror {command}: {exc}", file=sys.stderr)
    return 1


def _known_errors() -> tuple[type[BaseException], ...]:
    from llmgw.mirror.download import DownloadError
    from llmgw.mirror.fetch import AddFailed
    from llmgw.mirror.importer import ImportRefused
    from llmgw.mirror.layout import LayoutError
    from llmgw.mirror.ops import CatalogError, InUse
    from llmgw.mirror.registry import RegistryError
    from llmgw.mirror.safefetch import BlockedAddress, FetchError

    return (DownloadError, AddFailed, ImportRefused, LayoutError, CatalogError, InUse, RegistryError,
            BlockedAddress, FetchError, OSError)


def _size(n: int | None) -> str:
    from llmgw.mirror.progress import human_bytes

    return human_bytes(n) if n is not None else "?"


# ---------------------------------------------------------------- handlers


async def run_serve(args: argparse.Namespace) -> int:
    from llmgw.cli.main import UsageError
    from llmgw.mirror.serve import OptionsError, ServeOptions, api_mode, serve

    options = ServeOptions(directory=args.dir, base=args.base, listen=args.listen, api_listen=args.api_listen,
                           tls_cert=args.tls_cert, tls_key=args.tls_key, tls_ca=args.tls_ca,
                           api_client=args.api_client, catalog=args.catalog, registry=args.registry,
                           allow_private=args.allow_private)
    try:
        api_mode(options)
        await serve(options)  # says where it listens in the log
    except OptionsError as exc:
        raise UsageError(str(exc)) from None
    except _known_errors() as exc:
        return _fail("serve", exc)
    return 0


async def run_add(args: argparse.Namespace) -> int:
    from llmgw.cli.main import UsageError
    from llmgw.config.units import ByteSize
    from llmgw.mirror.fetch import MirrorFetcher
    from llmgw.mirror.layout import Layout
    from llmgw.mirror.progress import Progress
    from llmgw.mirror.registry import Registry
    from llmgw.mirror.safefetch import SafeFetcher

    try:
        max_bytes = int(ByteSize.parse(args.max_size))
    except ValueError as exc:
        raise UsageError(f"--max-size: {exc}") from None
    layout = Layout(args.dir)
    try:
        async with SafeFetcher(allow_private=args.allow_private, offline=_offline(args)) as safe:
            fetcher = MirrorFetcher(layout, safe, Registry(safe, args.registry or None), max_bytes=max_bytes,
                                    progress=lambda label: Progress(label))
            result = await fetcher.add(args.source, patterns=args.files, name=args.name)
    except _known_errors() as exc:
        return _fail("add", exc)
    if args.json:
        print_json({"model": result.model, "version": result.version, "fetched": result.fetched,
                    "reused": result.reused, "already": result.already, "size": result.size,
                    "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in result.files]})
        return 0
    where = f"{result.model}/{result.version}"
    if result.unchanged_since:
        print(f"{where}: unchanged upstream; nothing new kept")
    elif result.already:
        print(f"{where}: already in the mirror, {len(result.files)} files, {_size(result.size)}")
    else:
        print(f"{where}: {len(result.files)} files, {_size(result.size)}, every one checked "
              f"({result.fetched} fetched, {result.reused} already here)")
    return 0


def _load_catalog(path: str):
    from llmgw.mirror.ops import Catalog

    return Catalog.load(path or None)


def run_list(args: argparse.Namespace) -> int:
    from llmgw.mirror import ops
    from llmgw.mirror.layout import Layout

    try:
        rows = ops.list_versions(Layout(args.dir), _load_catalog(args.catalog), args.model)
    except _known_errors() as exc:
        return _fail("list", exc)
    if args.json:
        print_json([r.to_json() for r in rows])
        return 0
    print_table([_row(r) for r in rows], ["model", "version", "state", "files", "size", "used_by", "origin"])
    return 0


def _row(r) -> dict[str, Any]:
    state = r.state
    if r.state in ("downloading", "incomplete"):
        state = f"{r.state} {r.percent}%" if r.percent is not None else f"{r.state} {_size(r.present)}"
    return {"model": r.model, "version": r.version, "state": state, "files": r.files, "size": _size(r.size),
            "used_by": ", ".join(r.used_by) or "-", "origin": r.origin}


def run_unused(args: argparse.Namespace) -> int:
    from llmgw.cli.main import UsageError
    from llmgw.mirror import ops
    from llmgw.mirror.layout import Layout

    if not args.catalog:
        raise UsageError("unused needs --catalog (server.yaml or a map of model names to sources) to know what is used")
    try:
        rows = ops.unused_versions(Layout(args.dir), _load_catalog(args.catalog))
    except _known_errors() as exc:
        return _fail("unused", exc)
    if args.json:
        print_json([r.to_json() for r in rows])
        return 0
    print_table([_row(r) for r in rows], ["model", "version", "state", "files", "size", "origin"])
    if rows:
        total = sum(r.present for r in rows)
        print(f"{len(rows)} versions, {_size(total)}; `llmgw mirror remove MODEL/VERSION` frees one")
    return 0


def run_remove(args: argparse.Namespace) -> int:
    from llmgw.mirror import ops
    from llmgw.mirror.layout import Layout

    try:
        removed = ops.remove(Layout(args.dir), args.target, _load_catalog(args.catalog), force=args.force)
    except ops.InUse as exc:
        print(f"llmgw mirror remove: warning: {exc}", file=sys.stderr)
        return 1
    except _known_errors() as exc:
        return _fail("remove", exc)
    for model, version in removed:
        print(f"removed {model}/{version}")
    return 0


async def run_verify(args: argparse.Namespace) -> int:
    from llmgw.mirror import ops
    from llmgw.mirror.layout import Layout

    try:
        results = await ops.verify(Layout(args.dir), args.target)
    except _known_errors() as exc:
        return _fail("verify", exc)
    bad = [r for r in results if r.problems]
    if args.json:
        print_json([r.to_json() for r in results])
    else:
        for r in results:
            print(f"{r.model}/{r.version}: {'MISMATCH' if r.problems else 'ok'} ({r.checked} files checked)")
            for problem in r.problems:
                print(f"  {problem}")
            for note in r.notes:
                print(f"  note: {note}")
        if not results:
            print("(nothing to verify)")
    return 1 if bad else 0


async def run_import(args: argparse.Namespace) -> int:
    from llmgw.mirror.importer import import_file
    from llmgw.mirror.layout import Layout

    try:
        result = await import_file(Layout(args.dir), args.file, args.name)
    except _known_errors() as exc:
        return _fail("import", exc)
    if result.unchanged_since:
        print(f"{result.model}/{result.version} already holds this file; nothing new kept")
    else:
        f = result.files[0]
        print(f"{result.model}/{result.version}/{f.path}: {_size(f.size)}, sha256 {f.sha256}")
    return 0


async def run_import_ollama(args: argparse.Namespace) -> int:
    from llmgw.mirror.importer import import_ollama
    from llmgw.mirror.layout import Layout

    try:
        result = await import_ollama(Layout(args.dir), args.model, args.ollama_dir or None, name=args.name,
                                     base_url=args.base)
    except _known_errors() as exc:
        return _fail("import-ollama", exc)
    state = "already in the mirror" if result.unchanged_since else "imported, digests checked"
    files = ", ".join(f.path for f in result.files)
    print(f"{result.model}/{result.version}: {state} ({files})", file=sys.stderr)
    sys.stdout.write(result.definition)
    return 0


async def run_check_updates(args: argparse.Namespace) -> int:
    from llmgw.mirror import ops
    from llmgw.mirror.layout import Layout
    from llmgw.mirror.registry import Registry
    from llmgw.mirror.safefetch import SafeFetcher

    try:
        async with SafeFetcher(allow_private=args.allow_private, offline=_offline(args)) as safe:
            rows = await ops.check_updates(Layout(args.dir), Registry(safe, args.registry or None), args.model)
    except _known_errors() as exc:
        return _fail("check-updates", exc)
    if args.json:
        print_json([r.to_json() for r in rows])
    else:
        print_table([{"model": r.model, "version": r.version, "repo": f"{r.repo}@{r.requested}",
                      "local": r.local_revision[:12], "upstream": r.upstream_revision[:12],
                      "status": r.status + (f": {r.error}" if r.error else "")
                      + (f" ({len(r.changed)} files)" if r.changed else "")} for r in rows],
                    ["model", "version", "repo", "local", "upstream", "status"])
    return 1 if any(r.status == "error" for r in rows) else 0


async def run_search(args: argparse.Namespace) -> int:
    from llmgw.mirror.registry import Registry
    from llmgw.mirror.safefetch import SafeFetcher

    try:
        async with SafeFetcher(allow_private=args.allow_private, offline=_offline(args)) as safe:
            found = await Registry(safe, args.registry or None).search(args.query, sort=args.sort, limit=args.limit)
    except _known_errors() as exc:
        return _fail("search", exc)
    if args.json:
        print_json([{"repo": r.repo, "downloads": r.downloads, "likes": r.likes, "created_at": r.created_at}
                    for r in found])
        return 0
    print_table([{"repo": r.repo, "downloads": r.downloads, "likes": r.likes, "created": r.created_at[:10]}
                 for r in found], ["repo", "downloads", "likes", "created"])
    return 0


def run_offline(args: argparse.Namespace) -> int:
    from llmgw.mirror.offline import offline_reason, set_offline

    if args.state is not None:
        try:
            set_offline(args.dir, args.state == "on", by="llmgw mirror offline on")
        except OSError as exc:
            return _fail("offline", exc)
    reason = offline_reason(args.dir)
    print(f"{args.dir}: offline: {reason}" if reason else f"{args.dir}: online (fetches from outside are allowed)")
    return 0
