-- llmgw store, PostgreSQL dialect: the replica set the leading control plane serves, for its standbys'
-- routers (llmgw.control.replica_view). One row per view name; `version` grows whenever `body` (JSON) changes,
-- `confirmed_at` whenever the leader says it still stands. A leader of an older `epoch` cannot overwrite it.

CREATE TABLE replica_views (
    name          TEXT PRIMARY KEY,
    holder        TEXT NOT NULL,
    epoch         BIGINT NOT NULL,
    version       BIGINT NOT NULL,
    body          TEXT NOT NULL,
    changed_at    TIMESTAMPTZ NOT NULL,
    confirmed_at  TIMESTAMPTZ NOT NULL
);
