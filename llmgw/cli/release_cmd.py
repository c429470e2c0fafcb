"""`llmgw release`: make a release key, sign a release folder, verify one."""

from __future__ import annotations

import argparse
import os
import sys

from llmgw.cli.common import add_json_flag, print_json, usage_of

HELP = "Sign llmgw releases and verify them: keygen, sign, verify (Ed25519, docs/releases.md)."
#: The control plane's server.yaml, whose releases keys are taken when it is there and --config names none.
DEFAULT_CONFIG = "/etc/llmgw/server.yaml"


def register(sub) -> None:
    parser = sub.add_parser("release", help=HELP, description=HELP)
    parser.set_defaults(handler=usage_of(parser, "release"))
    cmds = parser.add_subparsers(dest="release_command", metavar="SUBCOMMAND", parser_class=type(parser))

    p = cmds.add_parser("keygen", help="make a release signing key pair",
                        description="Make an Ed25519 release key pair in DIR: llmgw-release.key (the private key, "
                        "mode 0600; keep it off the cluster) and llmgw-release.pub (give it to every cluster). "
                        "Prints the key's id. Never writes over a key that is there.")
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to write the two files in (made if missing)")
    add_json_flag(p)
    p.set_defaults(handler=run_keygen)

    p = cmds.add_parser("sign", help="write SHA256SUMS and its signature for a release folder",
                        description="List every file in DIR (the zipapps for each architecture, engine source "
                        "archives, anything else there) with its sha256 in DIR/SHA256SUMS, and sign that file "
                        "with KEY into DIR/SHA256SUMS.sig. Signing again replaces both.")
    p.add_argument("dir", metavar="DIR", help="the release folder")
    p.add_argument("--key", required=True, metavar="KEY", help="the private key file (llmgw-release.key, mode 0600)")
    add_json_flag(p)
    p.set_defaults(handler=run_sign)

    p = cmds.add_parser("verify", help="check a release folder: trusted signature, every file, nothing extra",
                        description="Exit 0 only when DIR/SHA256SUMS.sig is a signature by a trusted key that is "
                        "not revoked, every file SHA256SUMS lists is there with its sha256, and no file is there "
                        "that it does not list. Trusted: the keys built into llmgw, server.yaml's "
                        "releases.trusted_keys (with --config), and --trust. Each problem is said; exit 1.")
    p.add_argument("dir", metavar="DIR", help="the release folder")
    trust_arguments(p)
    add_json_flag(p)
    p.set_defaults(handler=run_verify)


def trust_arguments(p: argparse.ArgumentParser) -> None:
    """--trust, --revoke and --config, for every command that takes a release in."""
    p.add_argument("--trust", action="append", default=[], metavar="PUBKEY",
                   help="also trust this public key: a .pub file or its base64 (repeatable)")
    p.add_argument("--revoke", action="append", default=[], metavar="KEYID",
                   help="distrust this key id, wherever it is trusted (repeatable)")
    p.add_argument("--config", default=os.environ.get("LLMGW_CONFIG", ""), metavar="SERVER_YAML",
                   help="take releases.trusted_keys and releases.revoked_keys from this server.yaml (default "
                   f"$LLMGW_CONFIG, else {DEFAULT_CONFIG} where it exists; none: only built-in keys and --trust)")


def trust_of(args: argparse.Namespace):
    """The trust set the flags name; KeyError_ or ConfigError when one cannot be read."""
    from pathlib import Path

    from llmgw.release.trust import trust_for_config

    config = args.config or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None)
    return trust_for_config(config, trusted=args.trust, revoked=args.revoke)


def known_errors() -> tuple[type[BaseException], ...]:
    from llmgw.config import ConfigError
    from llmgw.release.checksums import SignatureError
    from llmgw.release.keys import KeyError_

    return (ConfigError, SignatureError, KeyError_, OSError)



def _fail(command: str, exc: BaseException) -> int:
    print(f"llmgw release {command}: {exc}", file=sys.stderr)
    return 1


def run_keygen(args: argparse.Namespace) -> int:
    from llmgw.release.keys import generate

    try:
        private, public, kid = generate(args.out)
    except known_errors() as exc:
        return _fail("keygen", exc)
    if args.json:
        print_json({"key_id": kid, "private_key": str(private), "public_key": str(public)})
        return 0
    print(f"key id {kid}")
    print(f"  private key  {private} (mode 0600: keep it where releases are signed, never on the cluster)")
    print(f"  public key   {public} (add it to server.yaml's releases.trusted_keys)")
    return 0


def run_sign(args: argparse.Namespace) -> int:
    from llmgw.release.checksums import SIG, SUMS, sign_release
    from llmgw.release.keys import load_private_key

    try:
        files, kid = sign_release(args.dir, load_private_key(args.key))
    except known_errors() as exc:
        return _fail("sign", exc)
    if args.json:
        print_json({"key_id": kid, "files": files})
        return 0
    print(f"{os.path.join(args.dir, SUMS)}: {len(files)} files; signed by key {kid} into {SIG}")
    for name in files:
        print(f"  {name}")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from llmgw.release.verify import ReleaseRefused, verify_release

    try:
        trust = trust_of(args)
        files = verify_release(args.dir, trust)
    except ReleaseRefused as exc:
        if args.json:
            print_json({"ok": False, "problems": exc.problems})
        else:
            print(f"llmgw release verify: {exc.where}: refused", file=sys.stderr)
            for problem in exc.problems:
                print(f"  {problem}", file=sys.stderr)
        return 1
    except known_errors() as exc:
        return _fail("verify", exc)
    if args.json:
        print_json({"ok": True, "files": [{"path": f.path, "sha256": f.sha256, "size": f.size} for f in files]})
        return 0
    print(f"{args.dir}: verified, {len(files)} files, signature by a trusted key")
    return 0


# ---------------------------------------------------------------- llmgw mirror release …


def register_mirror(mirror_cmds, add_dir) -> None:
    """`llmgw mirror release add|list`: releases kept in the mirror for nodes and upgrades to fetch."""
    parser = mirror_cmds.add_parser("release", help="keep verified llmgw releases in the mirror: add, list",
                                    description="Keep llmgw releases in the mirror (MIRROR/_llmgw/releases/VERSION/) "
                                    "for nodes and upgrades to fetch. Only a release that `llmgw release verify` "
                                    "accepts is taken in.")
    parser.set_defaults(handler=usage_of(parser, "mirror release"))
    cmds = parser.add_subparsers(dest="mirror_release_command", metavar="SUBCOMMAND", parser_class=type(parser))
    p = cmds.add_parser("add", help="verify a release folder and copy it into the mirror",
                        description="Verify RELEASE_DIR as `llmgw release verify` does, then copy it into the mirror "
                        "as MIRROR/_llmgw/releases/VERSION/ (VERSION from the zipapps' names, or --name). "
                        "Unsigned, signed by a key not trusted, signed by a revoked key, or with any file changed, "
                        "missing or extra: refused, and nothing is written.")
    p.add_argument("release_dir", metavar="RELEASE_DIR")
    p.add_argument("--name", help="the release's name in the mirror (default: the version in its zipapps' names)")
    add_dir(p)
    trust_arguments(p)
    p.set_defaults(handler=run_mirror_release_add)
    p = cmds.add_parser("list", help="the releases the mirror holds")
    add_dir(p)
    add_json_flag(p)
    p.set_defaults(handler=run_mirror_release_list)


def run_mirror_release_add(args: argparse.Namespace) -> int:
    from llmgw.release.store import add_release
    from llmgw.release.verify import ReleaseRefused

    try:
        stored = add_release(args.dir, args.release_dir, trust_of(args), name=args.name)
    except ReleaseRefused as exc:
        print(f"llmgw mirror release add: {exc.where}: refused; nothing was written", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    except known_errors() as exc:
        print(f"llmgw mirror release add: {exc}", file=sys.stderr)
        return 1
    state = "already in the mirror, unchanged" if stored.already else "verified and added"
    print(f"release {stored.name}: {state} ({len(stored.files)} files) at {stored.path}")
    return 0


def run_mirror_release_list(args: argparse.Namespace) -> int:
    from llmgw.release.store import list_releases

    names = list_releases(args.dir)
    if args.json:
        print_json(names)
    else:
        for name in names:
            print(name)
        if not names:
            print("(no release in this mirror)")
    return 0
