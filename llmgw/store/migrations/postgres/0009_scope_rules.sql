-- llmgw store, PostgreSQL dialect: rules an organization, team, project or key
-- keeps on its keys. max_key_ttl_s: the longest a key made under it may live
-- (NULL: no cap of its own; each level narrows the one above). in_cluster:
-- true when its requests must stay on the cluster's own engines (no external
-- provider, no federation peer). The row goes when nothing is left set.

CREATE TABLE scope_rules (
    scope_kind     TEXT NOT NULL CHECK (scope_kind IN ('org', 'team', 'project', 'key')),
    scope_id       TEXT NOT NULL,
    max_key_ttl_s  BIGINT,
    in_cluster     BOOLEAN NOT NULL DEFAULT FALSE,
    updated_at     TIMESTAMPTZ NOT NULL,
    actor          TEXT NOT NULL,
    PRIMARY KEY (scope_kind, scope_id)
);
