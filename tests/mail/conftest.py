"""The mail tests: the web suite's site (a gateway and its portal) and the store suite's stores."""

from __future__ import annotations

# Imported under the names pytest gives them (tests/ has no __init__.py): their fixtures, not copies.
from store.conftest import FakeClock, clock, store, store_dsn  # noqa: F401
from web.conftest import engine, make_site  # noqa: F401
