"""Keys, principals and tenancy: the store-touching ones run on SQLite and PostgreSQL."""
