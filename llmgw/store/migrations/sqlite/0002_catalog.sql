-- llmgw store, SQLite dialect: the run-time catalog.
-- Models added while the cluster runs (kind 'model', the spec a model takes
-- in server.yaml) and run-time changes to the scaling of a model server.yaml
-- declares (kind 'scaling', the spec a `scaling:` section takes). Whoever
-- changes a row states the version they read, so two control planes cannot
-- overwrite each other's change unseen.

CREATE TABLE catalog_models (
    name        TEXT PRIMARY KEY,
    kind        TEXT NOT NULL CHECK (kind IN ('model', 'scaling')),
    spec        TEXT NOT NULL,             -- JSON
    version     INTEGER NOT NULL,          -- 1 when created, +1 per change
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    actor       TEXT NOT NULL
);
