-- llmgw store, SQLite dialect: the replica set the leading control plane serves, for its standbys'
-- routers (llmgw.control.replica_view). One row per view name; `version` grows whenever `body` (JSON) changes,
-- `confirmed_at` whenever the leader says it still stands. A leader of an older `epoch` cannot overwrite it.

CREATE TABLE replica_views (
    name          TEXT PRIMARY KEY,
    holder        TEXT NOT NULL,
    epoch         INTEGER NOT NULL,
    version       INTEGER NOT NULL,
    body          TEXT NOT NULL,
    changed_at    TEXT NOT NULL,
    confirmed_at  TEXT NOT NULL
);
