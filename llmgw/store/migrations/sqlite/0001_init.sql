-- llmgw store, SQLite dialect: the first schema.
-- Times are text, ISO 8601 in UTC with microseconds and a Z
-- ('2025-01-31T09:00:00.000000Z'), so they sort as they compare.
-- JSON is text. Money is integer micro-dollars.

CREATE TABLE orgs (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    name_key    TEXT NOT NULL UNIQUE,      -- the name case-folded: unique among organizations
    created_at  TEXT NOT NULL
);

CREATE TABLE teams (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    name        TEXT NOT NULL,
    name_key    TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    UNIQUE (org_id, name_key)
);

CREATE TABLE projects (
    id          TEXT PRIMARY KEY,
    org_id      TEXT NOT NULL REFERENCES orgs(id),
    team_id     TEXT REFERENCES teams(id),
    parent_id   TEXT NOT NULL,             -- team_id, else org_id: names are unique per parent
    name        TEXT NOT NULL,
    name_key    TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    UNIQUE (parent_id, name_key)
);
CREATE INDEX projects_org ON projects (org_id);
CREATE INDEX projects_team ON projects (team_id);

CREATE TABLE users (
    id             TEXT PRIMARY KEY,
    email          TEXT NOT NULL UNIQUE,   -- lower case
    name           TEXT NOT NULL,
    role           TEXT NOT NULL DEFAULT 'none'
                   CHECK (role IN ('none', 'viewer', 'operator', 'billing', 'admin')),
    state          TEXT NOT NULL DEFAULT 'active'
                   CHECK (state IN ('active', 'pending', 'suspended')),
    password_hash  TEXT,
    created_at     TEXT NOT NULL
);

CREATE TABLE memberships (
    user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    scope_kind  TEXT NOT NULL CHECK (scope_kind IN ('org', 'team', 'project')),
    scope_id    TEXT NOT NULL,
    role        TEXT NOT NULL CHECK (role IN ('owner', 'member')),
    created_at  TEXT NOT NULL,
    PRIMARY KEY (user_id, scope_kind, scope_id)
);
CREATE INDEX memberships_scope ON memberships (scope_kind, scope_id);

CREATE TABLE api_keys (
    id              TEXT PRIMARY KEY,
    prefix          TEXT NOT NULL,
    key_hash        TEXT NOT NULL UNIQUE,  -- sha256 hex of the secret
    name            TEXT NOT NULL,
    project_id      TEXT REFERENCES projects(id),
    user_id         TEXT REFERENCES users(id),
    created_at      TEXT NOT NULL,
    expires_at      TEXT,
    revoked_at      TEXT,
    last_used_at    TEXT,
    priority_band   TEXT,
    allowed_models  TEXT,                  -- JSON list, NULL: no list of its own
    CHECK (project_id IS NOT NULL OR user_id IS NOT NULL)
);
CREATE INDEX api_keys_project ON api_keys (project_id);
CREATE INDEX api_keys_user ON api_keys (user_id);

CREATE TABLE limits (
    scope_kind      TEXT NOT NULL CHECK (scope_kind IN ('org', 'team', 'project', 'user', 'key')),
    scope_id        TEXT NOT NULL,
    rpm             INTEGER,
    tpm             INTEGER,
    budget_micros   INTEGER,
    budget_period   TEXT CHECK (budget_period IN ('day', 'month')),
    allowed_models  TEXT,
    updated_at      TEXT NOT NULL,
    PRIMARY KEY (scope_kind, scope_id)
);

-- One row a request. Pruned by the usage retention; the sums below are kept.
CREATE TABLE usage (
    request_id         TEXT PRIMARY KEY,
    at                 TEXT NOT NULL,
    key_id             TEXT,
    project_id         TEXT,
    team_id            TEXT,
    org_id             TEXT,
    user_id            TEXT,
    model_requested    TEXT NOT NULL,
    model_served       TEXT NOT NULL,
    replica            TEXT NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    cached_tokens      INTEGER NOT NULL,
    cost_micros        INTEGER NOT NULL,
    status             INTEGER NOT NULL,
    outcome            TEXT NOT NULL,
    latency_ms         INTEGER NOT NULL,
    ttft_ms            INTEGER,
    client_user        TEXT,
    metadata           TEXT,
    tags               TEXT NOT NULL
);
CREATE INDEX usage_at ON usage (at);
CREATE INDEX usage_key_at ON usage (key_id, at);
CREATE INDEX usage_project_at ON usage (project_id, at);
CREATE INDEX usage_org_at ON usage (org_id, at);
CREATE INDEX usage_user_at ON usage (user_id, at);

-- Sums per hour and per UTC day. An absent id is '' (not NULL) so the
-- primary key matches it; model is the served model, else the requested one.
CREATE TABLE usage_hourly (
    bucket             TEXT NOT NULL,
    org_id             TEXT NOT NULL,
    team_id            TEXT NOT NULL,
    project_id         TEXT NOT NULL,
    user_id            TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    model              TEXT NOT NULL,
    requests           INTEGER NOT NULL,
    errors             INTEGER NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    cached_tokens      INTEGER NOT NULL,
    cost_micros        INTEGER NOT NULL,
    latency_ms_sum     INTEGER NOT NULL,
    PRIMARY KEY (bucket, org_id, team_id, project_id, user_id, key_id, model)
);
CREATE INDEX usage_hourly_org ON usage_hourly (org_id, bucket);
CREATE INDEX usage_hourly_team ON usage_hourly (team_id, bucket);
CREATE INDEX usage_hourly_project ON usage_hourly (project_id, bucket);
CREATE INDEX usage_hourly_user ON usage_hourly (user_id, bucket);
CREATE INDEX usage_hourly_key ON usage_hourly (key_id, bucket);

CREATE TABLE usage_daily (
    bucket             TEXT NOT NULL,
    org_id             TEXT NOT NULL,
    team_id            TEXT NOT NULL,
    project_id         TEXT NOT NULL,
    user_id            TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    model              TEXT NOT NULL,
    requests           INTEGER NOT NULL,
    errors             INTEGER NOT NULL,
    prompt_tokens      INTEGER NOT NULL,
    completion_tokens  INTEGER NOT NULL,
    cached_tokens      INTEGER NOT NULL,
    cost_micros        INTEGER NOT NULL,
    latency_ms_sum     INTEGER NOT NULL,
    PRIMARY KEY (bucket, org_id, team_id, project_id, user_id, key_id, model)
);
CREATE INDEX usage_daily_org ON usage_daily (org_id, bucket);
CREATE INDEX usage_daily_team ON usage_daily (team_id, bucket);
CREATE INDEX usage_daily_project ON usage_daily (project_id, bucket);
CREATE INDEX usage_daily_user ON usage_daily (user_id, bucket);
CREATE INDEX usage_daily_key ON usage_daily (key_id, bucket);

CREATE TABLE settings (
    key         TEXT PRIMARY KEY,
    value       TEXT NOT NULL,             -- JSON
    version     INTEGER NOT NULL,
    updated_at  TEXT NOT NULL,
    actor       TEXT NOT NULL
);

CREATE TABLE settings_history (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    key      TEXT NOT NULL,
    value    TEXT,                         -- JSON; NULL when removed
    removed  INTEGER NOT NULL DEFAULT 0,
    version  INTEGER NOT NULL,
    at       TEXT NOT NULL,
    actor    TEXT NOT NULL
);
CREATE INDEX settings_history_key ON settings_history (key, id);

CREATE TABLE leases (
    name         TEXT PRIMARY KEY,
    holder       TEXT NOT NULL,
    epoch        INTEGER NOT NULL,
    acquired_at  TEXT NOT NULL,
    expires_at   TEXT NOT NULL
);

CREATE TABLE audit_events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    at      TEXT NOT NULL,
    actor   TEXT NOT NULL,
    action  TEXT NOT NULL,
    target  TEXT NOT NULL,
    detail  TEXT                           -- JSON object
);
CREATE INDEX audit_events_at ON audit_events (at);
CREATE INDEX audit_events_actor ON audit_events (actor, id);
CREATE INDEX audit_events_target ON audit_events (target, id);
