"""Encrypting archives with age (pyrage): to recipients' public keys, or with a passphrase (age's scrypt mode).

An encrypted archive is an age file named `llmgw-backup-….tar.gz.age`; inside
is the same tar.gz `llmgw.backup.archive` describes. Nothing in it is readable
without one of the recipients' private keys (or the passphrase), and age's
authenticated chunks refuse any byte changed.

    sealer = Sealer.from_config(config)          # None: archives are written in clear
    with sealer.writer(out) as plain: ...        # write the tar.gz into `plain`; ciphertext goes to `out`
    with open_plain(path, opener) as f: ...      # the tar.gz read back, `opener` from --identity/--passphrase-file

To recipients the archive is streamed through age in a thread (nothing in
clear touches the disk). It is also sealed to a key made for this one
archive and held only in memory, so that the archive can be checked right
after it is written without the operator's private key being on the machine;
that key is forgotten once the check is done. age's scrypt mode takes only
bytes, so with a passphrase the archive is held in memory while it is
encrypted and read back.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Iterator
from typing import IO, Any

import attrs

from llmgw.backup.archive import BackupError

__all__ = ["AGE_MAGIC", "Opener", "Sealer", "is_encrypted", "open_plain", "parse_recipient", "read_identities",
           "read_passphrase", "settings_problems"]

AGE_MAGIC = b"age-encryption.org/v1\n"
_CHUNK = 1 << 20


def _pyrage() -> Any:
    try:
        import pyrage
    except ImportError:  # pragma: no cover - a dependency of llmgw; only a broken install lacks it
        raise BackupError("encrypted backups need the pyrage package, which this llmgw install lacks; "
                          "reinstall llmgw") from None
    return pyrage


def parse_recipient(text: str) -> Any:
    """An age recipient from its text: `age1…`, or an OpenSSH public key line (ssh-ed25519, ssh-rsa)."""
    pyrage = _pyrage()
    text = text.strip()
    try:
        if text.startswith("age1"):
            return pyrage.x25519.Recipient.from_str(text)
        if text.startswith(("ssh-ed25519 ", "ssh-rsa ")):
            return pyrage.ssh.Recipient.from_str(text)
    except pyrage.RecipientError as exc:
        raise ValueError(f"{_short(text)} is not a valid age recipient ({exc})") from None
    raise ValueError(f"{_short(text)} is not an age recipient; give an age1… public key (from "
                     "`llmgw server backup keygen` or age-keygen) or an ssh-ed25519/ssh-rsa public key line")


def _short(text: str) -> str:
    return repr(text if len(text) <= 24 else text[:20] + "…")


def read_passphrase(path: str, what: str = "backup.passphrase_file") -> str:
    """The passphrase in the file `path` (its first line); BackupError naming `what` when unusable."""
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise BackupError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BackupError(f"{what}: {path} is not text; put the passphrase on its first line") from None
    lines = text.splitlines()
    passphrase = lines[0] if lines else ""
    if not passphrase.strip():
        raise BackupError(f"{what}: {path} is empty; put the passphrase on its first line")
    return passphrase


def read_identities(path: str) -> list[Any]:
    """The private keys in an identity file: age's (AGE-SECRET-KEY-1… lines, # comments) or an OpenSSH key."""
    pyrage = _pyrage()
    try:
        with open(os.path.expanduser(path), "rb") as f:
            data = f.read()
    except OSError as exc:
        raise BackupError(f"--identity: cannot read {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN OPENSSH PRIVATE KEY-----" in data:
        try:
            return [pyrage.ssh.Identity.from_buffer(data)]
        except pyrage.IdentityError as exc:
            raise BackupError(f"--identity: {path} is an OpenSSH key age cannot use ({exc}); an encrypted "
                              "(passphrase-protected) ssh key is not supported, decrypt a copy first") from None
    found = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            found.append(pyrage.x25519.Identity.from_str(line))
        except pyrage.IdentityError:
            raise BackupError(f"--identity: line {number} of {path} is not an age private key "
                              "(AGE-SECRET-KEY-1…)") from None
    if not found:
        raise BackupError(f"--identity: {path} holds no age private key (AGE-SECRET-KEY-1… lines)")
    return found


def settings_problems(config: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """(key path, what is wrong) for backup.encrypt_to and backup.passphrase_file."""
    b = config.backup
    problems: list[tuple[tuple[str | int, ...], str]] = []
    for index, text in enumerate(b.encrypt_to):
        try:
            parse_recipient(text)
        except (ValueError, BackupError) as exc:
            problems.append((("backup", "encrypt_to", index), str(exc)))
    if b.encrypt_to and b.passphrase_file:
        problems.append((("backup", "passphrase_file"), "age encrypts to recipients or with a passphrase, not "
                                                        "both; keep encrypt_to or passphrase_file"))
    return problems


@attrs.frozen(kw_only=True)
class Opener:
    """What opens an encrypted archive: identities (private keys) or a passphrase."""

    identities: tuple[Any, ...] = ()
    passphrase: str | None = None

    @classmethod
    def from_files(cls, identity: str | None = None, passphrase_file: str | None = None) -> Opener:
        if identity and passphrase_file:
            raise BackupError("give --identity or --passphrase-file, not both")
        if identity:
            return cls(identities=tuple(read_identities(identity)))
        if passphrase_file:
            return cls(passphrase=read_passphrase(passphrase_file, "--passphrase-file"))
        return cls()

    @property
    def empty(self) -> bool:
        return not self.identities and self.passphrase is None


@attrs.frozen(kw_only=True)
class Sealer:
    """How this server encrypts its archives: backup.encrypt_to's recipients, or backup.passphrase_file."""

    recipients: tuple[Any, ...] = ()
    passphrase: str | None = None

    @classmethod
    def from_config(cls, config: Any) -> Sealer | None:
        """The server's sealer, or None when archives are written in clear; BackupError for a bad setting."""
        problems = settings_problems(config)
        if problems:
            from llmgw.config.errors import format_path

            key, why = problems[0]
            raise BackupError(f"{format_path(key)}: {why}")
        b = config.backup
        if b.encrypt_to:
            return cls(recipients=tuple(parse_recipient(t) for t in b.encrypt_to))
        if b.passphrase_file:
            return cls(passphrase=read_passphrase(b.passphrase_file))
        return None

    @property
    def describe(self) -> str:
        if self.passphrase is not None:
            return "encrypted with the passphrase of backup.passphrase_file"
        return f"encrypted to {len(self.recipients)} age recipient(s) of backup.encrypt_to"

    @contextlib.contextmanager
    def writer(self, out: IO[bytes]) -> Iterator[tuple[IO[bytes], Opener]]:
        """A file to write the archive's tar.gz into, and what opens the result; age's output goes to `out`.

        The result is complete in `out` once the block ends without error.
        """
        pyrage = _pyrage()
        if self.passphrase is not None:
            plain = io.BytesIO()
            yield plain, Opener(passphrase=self.passphrase)
            out.write(pyrage.passphrase.encrypt(plain.getvalue(), self.passphrase))
            return
        check_key = pyrage.x25519.Identity.generate()
        recipients = [*self.recipients, check_key.to_public()]
        read_fd, write_fd = os.pipe()
        reader = os.fdopen(read_fd, "rb")
        plain_out = os.fdopen(write_fd, "wb")
        failed: list[BaseException] = []

        def encrypt() -> None:
            try:
                pyrage.encrypt_io(reader, out, recipients)
            except BaseException as exc:  # said by the writer below
                failed.append(exc)
            finally:
                reader.close()  # a writer still writing gets a broken pipe rather than waiting forever

        thread = threading.Thread(target=encrypt, name="llmgw-backup-encrypt", daemon=True)
        thread.start()
        try:
            try:
                yield plain_out, Opener(identities=(check_key,))
            finally:
                with contextlib.suppress(OSError):
                    plain_out.close()
                thread.join()
        except BrokenPipeError:
            pass  # the encryption stopped first: its own error is said below
        if failed:
            raise BackupError(f"the archive could not be encrypted: {failed[0]}")


def is_encrypted(path: str) -> bool:
    """Whether the file at `path` is an age file (by its first bytes, not its name)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(AGE_MAGIC)) == AGE_MAGIC
    except FileNotFoundError:
        raise BackupError(f"{path}: no such file") from None
    except OSError as exc:
        raise BackupError(f"{path}: cannot be read ({exc.strerror or exc}); run as a user who can (sudo)") from None


@contextlib.contextmanager
def open_plain(path: str, opener: Opener | None) -> Iterator[IO[bytes]]:
    """The archive's tar.gz as a file read from the start: the file itself, or what age decrypts of it.

    BackupError when it is encrypted and `opener` is missing or does not
    open it; ArchiveDamaged (from the reader) when a chunk fails age's check.
    """
    from llmgw.backup.archive import ArchiveDamaged

    if not is_encrypted(path):
        with open(path, "rb") as f:
            yield f
        return
    if opener is None or opener.empty:
        raise BackupError(f"{path} is encrypted; give the private key with --identity FILE, or the passphrase "
                          "with --passphrase-file FILE")
    pyrage = _pyrage()
    if opener.passphrase is not None:
        with open(path, "rb") as f:
            data = f.read()
        try:
            plain = pyrage.passphrase.decrypt(data, opener.passphrase)
        except pyrage.DecryptError as exc:
            raise _decrypt_refusal(path, str(exc), passphrase=True) from None
        yield io.BytesIO(plain)
        return
    read_fd, write_fd = os.pipe()
    plain_in = os.fdopen(read_fd, "rb")
    writer = os.fdopen(write_fd, "wb")
    failed: list[BaseException] = []

    def decrypt() -> None:
        try:
            with open(path, "rb") as src:
                pyrage.decrypt_io(src, writer, list(opener.identities))
        except BaseException as exc:
            failed.append(exc)
        finally:
            with contextlib.suppress(OSError):
                writer.close()

    thread = threading.Thread(target=decrypt, name="llmgw-backup-decrypt", daemon=True)
    thread.start()
    try:
        yield _Checked(plain_in, failed, path)
    except ArchiveDamaged:
        if failed:  # what the tar reader saw is age's refusal, said in age's words
            raise _decrypt_refusal(path, str(failed[0]), passphrase=False) from None
        raise
    finally:
        plain_in.close()
        thread.join()
    if failed and not isinstance(failed[0], BrokenPipeError):
        raise _decrypt_refusal(path, str(failed[0]), passphrase=False)


class _Checked(io.RawIOBase):
    """The decrypted stream; a read that ends early because age refused a chunk raises, not a short file."""

    def __init__(self, f: IO[bytes], failed: list[BaseException], path: str) -> None:
        self._f = f
        self._failed = failed
        self._path = path

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._f.read(len(b))
        if not data and self._failed:
            raise _decrypt_refusal(self._path, str(self._failed[0]), passphrase=False)
        b[:len(data)] = data
        return len(data)


def _decrypt_refusal(path: str, why: str, *, passphrase: bool) -> BackupError:
    from llmgw.backup.archive import ArchiveDamaged

    if "no matching keys" in why.lower():
        return BackupError(f"{path}: none of the keys given opens it (it was encrypted to other recipients); "
                           "give the private key of one of backup.encrypt_to's recipients with --identity")
    if passphrase:  # age cannot tell a wrong passphrase from a damaged header
        return ArchiveDamaged(f"{path}: the passphrase does not open it, or the archive is damaged ({why})")
    return ArchiveDamaged(f"{path}: age refuses it ({why}); the archive is damaged or was altered")
