"""The agent putting a signed release's zipapp in place of its own program, or the one before it back.

    done = await replace_program(program, version="0.2.0", mirror="http://mirror:8081", trust=trust)
    # then the agent re-execs itself (llmgw/cli/agent_cmd.py): same pid, its engines still its children

The release comes from the mirror's file server, as `mirror release add`
stored it: `_llmgw/releases/VERSION/SHA256SUMS`, its signature and the
zipapp for this machine, `llmgw-VERSION-linux-ARCH.pyz`. Only SHA256SUMS,
its signature and this machine's zipapp are fetched (not the other
architectures'). Nothing is put in place unless the signature is by a key
the node trusts (agent.yaml's `releases`, and the built-in keys) and not
revoked, the zipapp's sha256 is the one SHA256SUMS lists, and the file says
it is that version; otherwise `UpgradeRefused` says why and the program is
untouched.

The new file is written beside the program and renamed over it (one
rename: the path holds the old file or the new one, never half of one);
the old one is kept as PROGRAM.previous for `back`.

The agent (on an `Upgrade` message) and a control plane (asked by the
leader through the store, llmgw/control/plane_upgrade.py) both go through
`upgrade_self`, then `exec_again`: one way to replace a running llmgw.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import sys
import zipfile
from pathlib import Path
from urllib.parse import quote

import aiohttp
import attrs

from llmgw.durable import fsync_dir
from llmgw.release.checksums import SIG, SUMS, SignatureError, parse_sums
from llmgw.release.store import RELEASES, RELEASE_NAME
from llmgw.release.trust import TrustSet
from llmgw.release.verify import verify_signed_document

__all__ = ["UpgradeRefused", "CannotReplaceItself", "Replaced", "upgrade_self", "exec_again", "running_program",
           "replace_program", "put_back_previous", "previous_version",
           "zipapp_version", "signed_listing", "release_url", "zipapp_names", "PREVIOUS_SUFFIX"]

PREVIOUS_SUFFIX = ".previous"
_ARCH_NAMES = {"x86_64": ("x86_64", "amd64"), "amd64": ("x86_64", "amd64"),
               "aarch64": ("aarch64", "arm64"), "arm64": ("aarch64", "arm64")}
MAX_ZIPAPP_BYTES = 2 << 30


class UpgradeRefused(Exception):
    """The program was not replaced; the message says why in words."""


class CannotReplaceItself(UpgradeRefused):
    """This process does not run from llmgw's one file (a source checkout), or cannot start itself again."""


@attrs.frozen
class Replaced:
    program: Path
    version: str  #: what the file in place now says it is
    previous: Path  #: the file that was in place before
    sha256: str = ""


def running_program() -> Path:
    """The zipapp this process runs (zipapp_boot sets LLMGW_PYZ); UpgradeRefused from a source checkout."""
    value = os.environ.get("LLMGW_PYZ", "")
    if not value or not Path(value).is_file():
        raise CannotReplaceItself("this process does not run from llmgw's one file (a source checkout, or LLMGW_PYZ "
                                  "is not set): install the zipapp (`llmgw install`) to upgrade it in place")
    return Path(value)


def zipapp_version(path: Path) -> str:
    """The version an llmgw zipapp says it is (its __main__.py's BUILD line); UpgradeRefused when it is not one."""
    try:
        with zipfile.ZipFile(path) as z:
            main = z.read("__main__.py").decode()
    except (zipfile.BadZipFile, KeyError, OSError, UnicodeDecodeError) as exc:
        raise UpgradeRefused(f"{path.name}: not an llmgw zipapp ({exc})") from None
    line = next((ln for ln in main.splitlines() if ln.startswith("BUILD = ")), None)
    try:
        build = json.loads(line.removeprefix("BUILD = ")) if line else None
        return str(build["version"])
    except (ValueError, TypeError, KeyError):
        raise UpgradeRefused(f"{path.name}: not an llmgw zipapp (its __main__.py names no build)") from None


def zipapp_names(version: str, machine: str) -> set[str]:
    """The names release `version`'s zipapp for `machine` may have (x86_64 or amd64, aarch64 or arm64)."""
    return {f"llmgw-{version}-linux-{a}.pyz" for a in _ARCH_NAMES.get(machine, (machine,))}


def _zipapp_entry(listed: dict[str, str], version: str, machine: str) -> tuple[str, str]:
    names = zipapp_names(version, machine)
    found = [(rel, digest) for rel, digest in sorted(listed.items()) if rel.rsplit("/", 1)[-1] in names]
    if not found:
        raise UpgradeRefused(f"release {version} has no zipapp for this machine ({machine}): {SUMS} lists "
                             f"{', '.join(sorted(listed)) or 'nothing'}")
    return found[0]


async def _get(http: aiohttp.ClientSession, url: str, *, missing_ok: bool = False) -> bytes | None:
    try:
        async with http.get(url) as response:
            if response.status == 404 and missing_ok:
                return None
            if response.status != 200:
                raise UpgradeRefused(f"{url}: the mirror answered HTTP {response.status}")
            return await response.read()
    except aiohttp.ClientError as exc:
        raise UpgradeRefused(f"{url}: could not reach the mirror ({exc})") from None


def release_url(mirror: str, version: str) -> str:
    return f"{mirror.rstrip('/')}/{RELEASES.as_posix()}/{quote(version)}"


async def signed_listing(http: aiohttp.ClientSession, mirror: str, version: str,
                         trust: TrustSet) -> tuple[str, dict[str, str]]:
    """(the signing key's id, file -> sha256) of release `version` on the mirror's file server, its SHA256SUMS
    signed by a key in `trust`; UpgradeRefused saying why otherwise."""
    base = release_url(mirror, version)
    document = await _get(http, f"{base}/{SUMS}", missing_ok=True)
    if document is None:
        raise UpgradeRefused(f"the mirror holds no release {version} ({base}/{SUMS} is not there): add it with "
                             "`llmgw mirror release add DIR` on the mirror")
    signature = await _get(http, f"{base}/{SIG}", missing_ok=True)
    kid, problems = verify_signed_document(document, signature, trust, name=SUMS, sig_name=SIG)
    if problems or kid is None:
        raise UpgradeRefused(f"release {version}: refused: " + "; ".join(problems))
    try:
        return kid, parse_sums(document, SUMS)
    except SignatureError as exc:
        raise UpgradeRefused(f"release {version}: refused: {exc}") from None


async def replace_program(program: Path, *, version: str, mirror: str, trust: TrustSet,
                          http: aiohttp.ClientSession | None = None, machine: str | None = None) -> Replaced:
    """Fetch, check and put in place release `version`'s zipapp at `program`; UpgradeRefused changes nothing."""
    if not RELEASE_NAME.fullmatch(version or ""):
        raise UpgradeRefused(f"release {version!r}: not a release name (letters, digits, '.', '_', '+', '-')")
    if not mirror:
        raise UpgradeRefused("no mirror to fetch the release from: set mirror in agent.yaml or mirror.url in "
                             "server.yaml")
    machine = machine or platform.machine()
    base = release_url(mirror, version)
    own = http is None
    http = http or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120))
    try:
        _, listed = await signed_listing(http, mirror, version, trust)
        rel, digest = _zipapp_entry(listed, version, machine)
        partial = program.with_name(f".{program.name}.{secrets.token_hex(4)}.partial")
        try:
            sha = hashlib.sha256()
            size = 0
            try:
                async with http.get(f"{base}/{quote(rel)}") as response:
                    if response.status != 200:
                        raise UpgradeRefused(f"{base}/{rel}: the mirror answered HTTP {response.status}")
                    with open(partial, "wb") as out:
                        async for chunk in response.content.iter_chunked(1 << 20):
                            size += len(chunk)
                            if size > MAX_ZIPAPP_BYTES:
                                raise UpgradeRefused(f"{rel}: larger than {MAX_ZIPAPP_BYTES} bytes; not a zipapp")
                            sha.update(chunk)
                            out.write(chunk)
                        out.flush()
                        os.fsync(out.fileno())
            except aiohttp.ClientError as exc:
                raise UpgradeRefused(f"{base}/{rel}: the download broke ({exc})") from None
            if sha.hexdigest() != digest:
                raise UpgradeRefused(f"{rel}: its sha256 is {sha.hexdigest()}, not the {digest} the signed {SUMS} "
                                     "lists (changed or damaged on the way); nothing was replaced")
            says = zipapp_version(partial)
            if says != version:
                raise UpgradeRefused(f"{rel}: the file says it is llmgw {says}, not {version}; nothing was replaced")
            partial.chmod(0o755)
            previous = _keep_previous(program)
            os.replace(partial, program)
        finally:
            partial.unlink(missing_ok=True)
        fsync_dir(program.parent)
        return Replaced(program, version, previous, digest)
    finally:
        if own:
            await http.close()


def _keep_previous(program: Path) -> Path:
    """PROGRAM.previous: a second name for the file in place now (a copy when links are not possible)."""
    previous = program.with_name(program.name + PREVIOUS_SUFFIX)
    tmp = program.with_name(f".{program.name}.{secrets.token_hex(4)}.keep")
    try:
        os.link(program, tmp)
    except OSError:
        import shutil

        shutil.copy2(program, tmp)
    os.replace(tmp, previous)
    return previous


def previous_version(program: Path) -> str:
    """The version PROGRAM.previous is (what going back would run); UpgradeRefused, naming the file, when there is
    none to go back to. Nothing is changed (the leader asks every control plane this before anything goes back)."""
    previous = program.with_name(program.name + PREVIOUS_SUFFIX)
    if not previous.is_file():
        raise UpgradeRefused(f"there is no {previous.name} beside {program}: this machine's llmgw was not upgraded "
                             "by llmgw, so there is nothing to go back to")
    return zipapp_version(previous)


def put_back_previous(program: Path) -> Replaced:
    """Swap PROGRAM and PROGRAM.previous: the file from before the last upgrade runs again (and the upgrade is kept
    as .previous, to go forward again)."""
    previous = program.with_name(program.name + PREVIOUS_SUFFIX)
    version = previous_version(program)
    swap = program.with_name(f".{program.name}.{secrets.token_hex(4)}.swap")
    os.link(program, swap)
    try:
        os.replace(previous, program)
        os.replace(swap, previous)
    finally:
        swap.unlink(missing_ok=True)
    fsync_dir(program.parent)
    return Replaced(program, version, previous)


async def upgrade_self(program: Path, *, version: str, back: bool, mirror: str, trust: TrustSet) -> Replaced:
    """What an agent and a control plane do alike to replace their own program: release `version` fetched, checked
    and put in place (or, `back`, the file before put back); UpgradeRefused changes nothing. Then `exec_again`."""
    import asyncio

    if back:
        return await asyncio.get_running_loop().run_in_executor(None, put_back_previous, program)
    return await replace_program(program, version=version, mirror=mirror, trust=trust)


def exec_again() -> None:
    """Replace this process with the program now in place: same pid, same arguments (an agent's engines stay its
    children; systemd sees no restart)."""
    sys.stdout.flush()
    sys.stderr.flush()
    argv = sys.orig_argv if getattr(sys, "orig_argv", None) else [sys.executable, *sys.argv]
    os.execv(sys.executable, [sys.executable, *argv[1:]])
