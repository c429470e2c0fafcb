"""Copies off the machine: each archive, once checked, copied to every destination of backup.copy_to.

A destination is a folder on this machine (an absolute path: a mounted
disk, an NFS share), `ssh://user@host[:port]/path` on another machine, or
`s3://bucket/prefix` in an S3-compatible bucket (llmgw.backup.s3).
Each copy is written under a temporary name, its sha256 checked against
the archive's, then given the archive's name with `NAME.sha256` beside it;
older archives there beyond backup.keep are removed, as in the backup folder
(only files named as llmgw names its archives).

SSH copies use the system's `ssh` client: it takes the operator's own keys,
agent, ~/.ssh/config and known_hosts as they are, adds no dependency, and
is what an operator already trusts and can test by hand. It runs with
BatchMode (never a prompt), strict host key checking, and the identity
and known_hosts files of backup.ssh_identity_file and
backup.ssh_known_hosts_file when set. The far side needs a POSIX shell,
`cat`, `mv`, `ls` and `sha256sum`.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import tempfile
from typing import Any
from urllib.parse import unquote, urlsplit

import attrs

from llmgw.backup.archive import BackupError, _name_key, fsync_dir, is_archive_name, prune, sha256_of

__all__ = ["Destination", "copy_everywhere", "copy_to", "parse_destination", "settings_problems"]

#: Seconds an ssh upload may take; other ssh commands get SSH_COMMAND_S.
SSH_UPLOAD_S = 3600.0
SSH_COMMAND_S = 60.0
SSH_CONNECT_S = 15


@attrs.frozen(kw_only=True)
class Destination:
    """One place of backup.copy_to."""

    text: str  #: as written in server.yaml
    kind: str  #: dir, ssh or s3
    path: str  #: the folder (on this machine, or on the far side), or the bucket's prefix
    user: str = ""
    host: str = ""
    port: int | None = None

    def __str__(self) -> str:
        return self.text


def parse_destination(text: str) -> Destination:
    """A destination from its text; ValueError saying what is wrong."""
    text = text.strip()
    if text.startswith("ssh://"):
        url = urlsplit(text)
        try:
            port = url.port
        except ValueError:
            raise ValueError(f"{text}: the port is not a number") from None
        if not url.hostname:
            raise ValueError(f"{text}: no host; write ssh://user@host/path")
        path = unquote(url.path)
        if not path.startswith("/") or path == "/":
            raise ValueError(f"{text}: give the folder on the far side, like ssh://backup@vault/srv/llmgw")
        if url.query or url.fragment or url.password:
            raise ValueError(f"{text}: only ssh://user@host[:port]/path; put keys in backup.ssh_identity_file")
        return Destination(text=text, kind="ssh", path=path, user=unquote(url.username or ""),
                           host=url.hostname, port=port)
    if text.startswith("s3://"):
        url = urlsplit(text)
        if not url.hostname or url.query or url.fragment or url.username:
            raise ValueError(f"{text}: write s3://bucket/prefix (the endpoint is backup.s3_endpoint)")
        return Destination(text=text, kind="s3", path=unquote(url.path).strip("/"), host=url.netloc)
    if re.match(r"[a-z][a-z0-9+.-]*://", text):
        scheme = text.split("://", 1)[0]
        raise ValueError(f"{text}: {scheme}:// is not a kind of destination llmgw copies to; give a folder "
                         "(an absolute path), ssh://user@host/path or s3://bucket/prefix")
    if not os.path.isabs(os.path.expanduser(text)):
        raise ValueError(f"{text}: give an absolute path (a folder on a disk other than the backup folder's)")
    return Destination(text=text, kind="dir", path=os.path.abspath(os.path.expanduser(text)))


def settings_problems(config: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """(key path, what is wrong) for backup.copy_to."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    seen: set[str] = set()
    for index, text in enumerate(config.backup.copy_to):
        try:
            dest = parse_destination(text)
        except ValueError as exc:
            problems.append((("backup", "copy_to", index), str(exc)))
            continue
        if dest.kind == "s3":
            for key in ("s3_endpoint", "s3_credentials_file"):
                if not getattr(config.backup, key):
                    problems.append((("backup", key), f"copy_to names {dest.text}; set backup.{key} too"))
        if dest.text in seen:
            problems.append((("backup", "copy_to", index), f"{dest.text} is named twice"))
        seen.add(dest.text)
        if dest.kind == "dir" and config.backup.dir and \
                os.path.abspath(os.path.expanduser(config.backup.dir)) == dest.path:
            problems.append((("backup", "copy_to", index), f"{dest.text} is backup.dir itself; a copy belongs "
                                                           "somewhere else"))
    return problems


async def copy_everywhere(config: Any, archive: str, keep: int) -> list[str]:
    """Copy `archive` to each destination of backup.copy_to; what was done at each.

    Every destination is tried; BackupError naming those that failed once all
    were tried (the archive itself stays in the backup folder).
    """
    done, failed = [], []
    for index, text in enumerate(config.backup.copy_to):
        try:
            dest = parse_destination(text)
            done.append(await copy_to(config, dest, archive, keep))
        except (BackupError, ValueError) as exc:
            failed.append(f"backup.copy_to[{index}] {text}: {exc}")
    if failed:
        copied = f"; it was copied to {', '.join(done)}" if done else ""
        raise BackupError(f"the archive {os.path.basename(archive)} was made and checked but not copied "
                          f"everywhere: {'; '.join(failed)}{copied}")
    return done


async def copy_to(config: Any, dest: Destination, archive: str, keep: int) -> str:
    """Copy one archive to one destination, check it there and prune; a line saying what was done."""
    digest, _ = await asyncio.to_thread(sha256_of, archive)
    if dest.kind == "dir":
        removed = await asyncio.to_thread(_copy_into_dir, dest.path, archive, digest, keep)
    elif dest.kind == "s3":
        from llmgw.backup.s3 import copy_to_bucket

        removed = await copy_to_bucket(config, dest.host, dest.path, archive, digest, keep)
    else:
        removed = await _SshCopier(config, dest).copy(archive, digest, keep)
    return f"{dest.text}" + (f" (removed there: {', '.join(removed)})" if removed else "")


# ---------------------------------------------------------------- a folder


def _copy_into_dir(folder: str, archive: str, digest: str, keep: int) -> list[str]:
    name = os.path.basename(archive)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".llmgw-backup-", suffix=".partial", dir=folder)
    except OSError as exc:
        raise BackupError(f"cannot write into {folder}: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as out, open(archive, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        copied, _ = sha256_of(tmp)
        if copied != digest:
            raise BackupError(f"the copy in {folder} reads back with another sha256; the disk there is failing")
        os.replace(tmp, os.path.join(folder, name))
        sidecar = os.path.join(folder, name + ".sha256")
        with open(os.open(sidecar + ".partial", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(f"{digest}  {name}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(sidecar + ".partial", sidecar)
        fsync_dir(folder)
    except OSError as exc:
        raise BackupError(f"cannot copy into {folder}: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return prune(folder, keep, spare=name)


# ---------------------------------------------------------------- ssh


class _SshCopier:
    def __init__(self, config: Any, dest: Destination) -> None:
        self.dest = dest
        b = config.backup
        self.base = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                     "-o", f"ConnectTimeout={SSH_CONNECT_S}", "-o", "LogLevel=ERROR"]
        if dest.port:
            self.base += ["-p", str(dest.port)]
        if b.ssh_identity_file:
            self.base += ["-i", os.path.expanduser(b.ssh_identity_file), "-o", "IdentitiesOnly=yes"]
        if b.ssh_known_hosts_file:
            self.base += ["-o", f"UserKnownHostsFile={os.path.expanduser(b.ssh_known_hosts_file)}"]
        self.base.append(f"{dest.user}@{dest.host}" if dest.user else dest.host)

    async def run(self, script: str, *, stdin_path: str | None = None, timeout: float = SSH_COMMAND_S) -> str:
        """Run `script` by the far side's shell; its output, or BackupError with ssh's own words."""
        if shutil.which("ssh") is None:
            raise BackupError("ssh:// copies need the ssh client (apt-get install openssh-client)")
        stdin = open(stdin_path, "rb") if stdin_path else asyncio.subprocess.DEVNULL  # noqa: SIM115
        try:
            proc = await asyncio.create_subprocess_exec(*self.base, "--", script, stdin=stdin,
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.PIPE)
            try:
                out, err = await asyncio.wait_for(proc.communicate(), timeout)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
                raise BackupError(f"ssh to {self.dest.host} took more than {timeout:.0f}s; stopped") from None
        finally:
            if stdin_path:
                stdin.close()  # type: ignore[union-attr]
        if proc.returncode != 0:
            said = err.decode(errors="replace").strip().splitlines()
            raise BackupError(f"ssh to {self.dest.host} failed (exit {proc.returncode}): "
                              f"{said[-1] if said else 'no message'}")
        return out.decode(errors="replace")

    async def copy(self, archive: str, digest: str, keep: int) -> list[str]:
        folder = self.dest.path
        name = os.path.basename(archive)
        q = shlex.quote
        partial = f"{folder}/.{name}.partial"
        await self.run(f"umask 077 && mkdir -p {q(folder)} && cat > {q(partial)}", stdin_path=archive,
                       timeout=SSH_UPLOAD_S)
        said = (await self.run(f"sha256sum {q(partial)}")).split()
        if not said or said[0].lower() != digest:
            await self.run(f"rm -f {q(partial)}")
            raise BackupError(f"the copy on {self.dest.host} reads back with another sha256; it was removed")
        sidecar = f"{digest}  {name}"
        await self.run(f"mv -f {q(partial)} {q(folder + '/' + name)} && "
                       f"printf '%s\\n' {q(sidecar)} > {q(folder + '/' + name + '.sha256')}")
        return await self.prune(keep, name)

    async def prune(self, keep: int, spare: str) -> list[str]:
        if keep <= 0:
            return []
        listing = await self.run(f"ls -1 {shlex.quote(self.dest.path)}")
        names = [n for n in listing.splitlines() if is_archive_name(n)]
        names.sort(key=lambda n: _name_key(n) or ("", 0), reverse=True)
        old = [n for n in names[keep:] if n != spare]
        if old:
            paths = " ".join(shlex.quote(f"{self.dest.path}/{n}") + " " + shlex.quote(f"{self.dest.path}/{n}.sha256")
                             for n in old)
            await self.run(f"rm -f {paths}")
        return old
