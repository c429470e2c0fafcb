"""Secrets in configuration files: a key, a password, a DSN with a password in it.

A value may be written three ways:

- `sk-...`: the secret itself, in the file;
- `env:NAME`: read from the environment variable NAME when the file is loaded;
- `file:/path`: read from that file (a relative path is taken from the
  configuration file's directory); one trailing newline is dropped.

Whatever the form, the value never appears in `repr()`, `str()`, logs or
dumps; code that needs it calls `reveal()`.
"""

from __future__ import annotations

import hmac
import os
import re
from pathlib import Path
from typing import Any, Mapping

from llmgw.config.units import describe

__all__ = ["Secret"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HIDDEN = "***"


class Secret:
    """A resolved secret value, and where it came from (`origin`)."""

    __slots__ = ("_value", "origin")

    def __init__(self, value: str, origin: str = "literal") -> None:
        self._value = value
        #: `literal`, `env:NAME` or `file:/absolute/path`: safe to show.
        self.origin = origin

    @classmethod
    def parse(
        cls,
        written: Any,
        *,
        environ: Mapping[str, str] | None = None,
        base_dir: str | os.PathLike[str] | None = None,
    ) -> Secret:
        """Resolve a value as written in YAML; a ValueError says what is missing."""
        if isinstance(written, Secret):
            return written
        if isinstance(written, bool) or not isinstance(written, (str, int)):
            raise ValueError(
                f"expected a secret (the value, env:NAME or file:/path), got {describe(written)}"
            )
        text = str(written)
        if text.startswith("env:"):
            return cls._from_env(text[4:].strip(), os.environ if environ is None else environ)
        if text.startswith("file:"):
            return cls._from_file(text[5:].strip(), base_dir)
        if not text:
            raise ValueError("empty; give the value, env:NAME or file:/path, or leave the key out")
        return cls(text)

    @classmethod
    def _from_env(cls, name: str, environ: Mapping[str, str]) -> Secret:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(
                f"env: needs an environment variable's name, like env:OPENAI_API_KEY, got {name!r}"
            )
        value = environ.get(name)
        if value is None:
            raise ValueError(
                f"environment variable {name} is not set; set it where the service starts "
                "(its systemd unit's Environment=, or an EnvironmentFile)"
            )
        if not value:
            raise ValueError(f"environment variable {name} is set but empty")
        return cls(value, f"env:{name}")

    @classmethod
    def _from_file(cls, name: str, base_dir: str | os.PathLike[str] | None) -> Secret:
        if not name:
            raise ValueError("file: needs a path, like file:/etc/llmgw/secrets/openai-key")
        path = Path(name).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        try:
            value = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(f"secret file {path} does not exist") from None
        except PermissionError:
            raise ValueError(
                f"secret file {path} cannot be read by this user; check its owner and mode"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"secret file {path} cannot be read: {exc}") from None
        if value.endswith("\n"):
            value = value[:-1]
            if value.endswith("\r"):
                value = value[:-1]
        if not value:
            raise ValueError(f"secret file {path} is empty")
        return cls(value, f"file:{path}")

    def reveal(self) -> str:
        """The secret itself, for the one place that has to send it."""
        return self._value

    @property
    def written(self) -> str:
        """What a dump writes back: the env:/file: reference, never a literal value."""
        return HIDDEN if self.origin == "literal" else self.origin

    def __repr__(self) -> str:
        return f"Secret('{HIDDEN}')"

    def __str__(self) -> str:
        return HIDDEN

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return self.origin == other.origin and hmac.compare_digest(
            self._value.encode(), other._value.encode()
        )

    def __hash__(self) -> int:
        return hash((Secret, self.origin, self._value))
