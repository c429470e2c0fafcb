"""Store tests: every one runs against SQLite and PostgreSQL."""
