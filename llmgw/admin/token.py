"""The admin API's bearer token: made on first start, kept 0600 in admin_token_file."""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

__all__ = ["TokenFileError", "ensure_token", "read_token", "tokens_match"]

#: 32 random bytes as URL-safe text: 43 characters.
TOKEN_BYTES = 32


class TokenFileError(Exception):
    """The token file cannot be made or read; the message names the file and why."""


def read_token(path: str | os.PathLike[str]) -> str:
    """The token in `path`, stripped; TokenFileError when it cannot be read or is empty."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise TokenFileError(f"{path} does not exist") from None
    except PermissionError:
        raise TokenFileError(f"{path} cannot be read (permission denied)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenFileError(f"{path} cannot be read: {exc}") from None
    if not text:
        raise TokenFileError(f"{path} is empty")
    return text


def ensure_token(path: str | os.PathLike[str]) -> str:
    """The token in `path`, made (0600, its folder 0700 when new) when there is none yet.

    A file that exists is used as it is, so an operator may write their own
    token there; one readable by others is tightened to 0600.
    """
    file = Path(path)
    if file.exists():
        token = read_token(file)
        try:
            if file.stat().st_mode & 0o077:
                os.chmod(file, 0o600)
        except OSError as exc:
            raise TokenFileError(f"{file} is readable by others and cannot be made 0600: {exc}") from None
        return token
    token = secrets.token_urlsafe(TOKEN_BYTES)
    try:
        file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # O_EXCL: two servers starting at once on one machine do not both write one.
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_token(file)
    except OSError as exc:
        raise TokenFileError(f"cannot write the admin token to {file}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    return token


def tokens_match(given: str, expected: str) -> bool:
    """Compare in constant time (for equal lengths), so timing says nothing about the token."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))
