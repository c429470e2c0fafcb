"""`llmgw bundle`: everything a site with no internet needs, in one signed archive: create, import, show."""

from __future__ import annotations

import argparse
import os
import sys

from llmgw.cli.common import add_json_flag, print_json, usage_of
from llmgw.cli.release_cmd import known_errors, trust_arguments, trust_of

HELP = "Offline bundles for sites with no internet: create one, check it, import it into a mirror."
DEFAULT_MIRROR = "/srv/models"


def register(sub) -> None:
    parser = sub.add_parser("bundle", help=HELP, description=HELP)
    parser.set_defaults(handler=usage_of(parser, "bundle"))
    cmds = parser.add_subparsers(dest="bundle_command", metavar="SUBCOMMAND", parser_class=type(parser))

    p = cmds.add_parser("create", help="make a signed bundle: a release, engines, wheels and models",
                        description="Make OUT, one tar archive holding a signed release folder, the Python "
                        "distributions the chosen engines install from, any other wheels, and model versions "
                        "from a mirror, with a manifest naming every file's sha256 and size, signed by KEY. "
                        "Each file is checked on the way in; the archive's own sha256 is printed, to carry to "
                        "the site apart from it.")
    p.add_argument("out", metavar="OUT", help="the archive to write (a new path, like llmgw-bundle.tar)")
    p.add_argument("--release", required=True, metavar="DIR", help="a release folder signed by `llmgw release sign`")
    p.add_argument("--mirror", default=os.environ.get("LLMGW_MIRROR_DIR", DEFAULT_MIRROR), metavar="MIRRORDIR",
                   help=f"the mirror the models (and engine sdists in its wheels/) come from "
                   f"(default $LLMGW_MIRROR_DIR or {DEFAULT_MIRROR})")
    p.add_argument("--models", default="", metavar="NAME[,..]",
                   help="models to bring, each NAME (its newest complete version) or NAME/VERSION")
    p.add_argument("--engines", default="", metavar="ENGINE[,..]",
                   help="engines nodes will install, like llama.cpp: their distributions from --wheels or the "
                   "mirror's wheels/ folder")
    p.add_argument("--wheels", metavar="DIR|REQUIREMENTS",
                   help="a folder of wheels and sdists to bring, every one; or a requirements file, whose "
                   "distributions and their dependencies `pip download` fetches (for this machine's Python)")
    p.add_argument("--key", default=os.environ.get("LLMGW_RELEASE_KEY", ""), metavar="KEY",
                   help="the release key that signs the manifest (default $LLMGW_RELEASE_KEY)")
    trust_arguments(p)
    add_json_flag(p)
    p.set_defaults(handler=run_create)

    p = cmds.add_parser("show", help="check a bundle without importing it, and say what it holds",
                        description="Check BUNDLE as import does (the signature, every file), write nothing, and "
                        "list what it holds. Exit 1, naming each problem, when it would be refused.")
    p.add_argument("bundle", metavar="BUNDLE")
    p.add_argument("--sha256", default="", metavar="HEX", help="the sha256 `bundle create` printed for it")
    trust_arguments(p)
    add_json_flag(p)
    p.set_defaults(handler=run_show)

    p = cmds.add_parser("import", help="check every file of a bundle, then put it in a mirror and mark it offline",
                        description="Check every file of BUNDLE against its signed manifest (signed by a trusted, "
                        "unrevoked key), and the release inside against its own signature, before anything is "
                        "written; any problem is named and the mirror is left as it was. Then the models go in "
                        "as MODEL/VERSION/, the wheels into wheels/ (the mirror's package index), the release "
                        "into _llmgw/releases/, and the mirror is marked offline (_llmgw/offline.json): it then "
                        "fetches nothing from outside.")
    p.add_argument("bundle", metavar="BUNDLE")
    p.add_argument("--mirror", default=os.environ.get("LLMGW_MIRROR_DIR", DEFAULT_MIRROR), metavar="DIR",
                   help=f"the mirror directory (default $LLMGW_MIRROR_DIR or {DEFAULT_MIRROR})")
    p.add_argument("--sha256", default="", metavar="HEX", help="the sha256 `bundle create` printed for it")
    p.add_argument("--online", action="store_true", help="do not mark the mirror offline")
    trust_arguments(p)
    add_json_flag(p)
    p.set_defaults(handler=run_import)



def _errors() -> tuple[type[BaseException], ...]:
    from llmgw.bundle.create import BundleError
    from llmgw.bundle.manifest import ManifestError

    return (BundleError, ManifestError, *known_errors())


def _refused(command: str, where: str, problems: list[str], *, as_json: bool, nothing: str = "") -> int:
    if as_json:
        print_json({"ok": False, "problems": problems})
        return 1
    print(f"llmgw bundle {command}: {where}: refused{nothing}", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    return 1


def run_create(args: argparse.Namespace) -> int:
    from llmgw.cli.main import UsageError
    from llmgw.bundle.create import create_bundle
    from llmgw.release.keys import load_private_key
    from llmgw.release.verify import ReleaseRefused

    if not args.key:
        raise UsageError("a bundle is signed: give --key KEY (a release key from `llmgw release keygen`)")
    try:
        created = create_bundle(args.out, release_dir=args.release, mirror_dir=args.mirror,
                                models=args.models.split(","), engines=args.engines.split(","),
                                wheels_dir=args.wheels, private_key=load_private_key(args.key), trust=trust_of(args))
    except ReleaseRefused as exc:
        return _refused("create", exc.where, exc.problems, as_json=args.json, nothing="; no bundle was made")
    except _errors() as exc:
        print(f"llmgw bundle create: {exc}", file=sys.stderr)
        return 1
    m = created.manifest
    if args.json:
        print_json({"path": str(created.path), "sha256": created.sha256, "size": created.size, "release": m.release,
                    "models": m.models, "engines": m.engines, "files": len(m.files)})
        return 0
    print(f"{created.path}: {len(m.files)} files, {created.size} bytes, signed")
    models = ", ".join(f"{x['name']}/{x['version']}" for x in m.models) or "none"
    print(f"  release {m.release}; models: {models}; engines: {', '.join(m.engines) or 'none'}")
    print(f"  sha256 {created.sha256}  (carry it to the site apart from the bundle: bundle import --sha256)")
    return 0


def run_show(args: argparse.Namespace) -> int:
    from llmgw.bundle.importer import BundleRefused, check_bundle

    try:
        manifest, kid, _ = check_bundle(args.bundle, trust_of(args), expected_sha256=args.sha256)
    except BundleRefused as exc:
        return _refused("show", exc.where, exc.problems, as_json=args.json)
    except _errors() as exc:
        print(f"llmgw bundle show: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print_json({"ok": True, "key_id": kid, "release": manifest.release, "models": manifest.models,
                    "engines": manifest.engines, "created_at": manifest.created_at,
                    "files": [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in manifest.files]})
        return 0
    print(f"{args.bundle}: every file checked, signed by key {kid}, made {manifest.created_at}")
    print(f"  release {manifest.release}")
    for m in manifest.models:
        print(f"  model {m['name']}/{m['version']}")
    for f in manifest.files:
        if f.path.startswith("wheels/"):
            print(f"  wheel {f.path[len('wheels/'):]}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    from llmgw.bundle.importer import BundleRefused, import_bundle

    try:
        done = import_bundle(args.bundle, args.mirror, trust_of(args), offline=not args.online,
                             expected_sha256=args.sha256)
    except BundleRefused as exc:
        return _refused("import", exc.where, exc.problems, as_json=args.json, nothing="; nothing was written")
    except _errors() as exc:
        print(f"llmgw bundle import: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print_json({"ok": True, "key_id": done.key_id, "written": done.written, "kept": done.kept,
                    "offline": bool(done.offline)})
        return 0
    print(f"{args.bundle}: every file checked (signed by key {done.key_id}); into {args.mirror}:")
    for what in done.written:
        print(f"  added {what}")
    for what in done.kept:
        print(f"  kept {what} (already there, the same)")
    if done.offline:
        print(f"  the mirror is offline now ({done.offline}): it fetches nothing from outside")
    return 0
