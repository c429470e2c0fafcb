-- llmgw store, PostgreSQL dialect: kept requests (`llmgw keys requests`).
-- kept_request_rules: which keys and projects asked for their requests to be
-- kept, and for how long (none is kept by default; a key's own rule wins over
-- its project's). kept_requests: one row a request kept, the body the model
-- was sent (after the guardrails' redaction) and the answer the client got
-- (a streamed one assembled into one chat completion), deleted once
-- expires_at passes, or with its person (`llmgw users forget`).

CREATE TABLE kept_request_rules (
    scope_kind    TEXT NOT NULL,              -- key | project
    scope_id      TEXT NOT NULL,
    keep_seconds  BIGINT  NOT NULL,           -- how long each request is kept
    updated_at    TIMESTAMPTZ NOT NULL,
    updated_by    TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (scope_kind, scope_id)
);

CREATE TABLE kept_requests (
    id                 TEXT PRIMARY KEY,      -- the request's id, req_…, as its usage row has it
    at                 TIMESTAMPTZ NOT NULL,
    expires_at         TIMESTAMPTZ NOT NULL,
    key_id             TEXT NOT NULL DEFAULT '',
    project_id         TEXT,
    org_id             TEXT,
    user_id            TEXT,
    endpoint           TEXT NOT NULL,         -- /v1/chat/completions, /v1/messages, …
    kind               TEXT NOT NULL,         -- chat | completion
    model              TEXT NOT NULL,         -- the model asked for
    model_served       TEXT NOT NULL DEFAULT '',
    status             INTEGER NOT NULL,
    outcome            TEXT NOT NULL,
    streamed           BOOLEAN NOT NULL,
    prompt_tokens      BIGINT  NOT NULL DEFAULT 0,
    completion_tokens  BIGINT  NOT NULL DEFAULT 0,
    guard_action       TEXT,                  -- redact, … when the guardrails changed the text
    request            TEXT NOT NULL,         -- JSON: the chat or completion body the model was sent
    answer             TEXT                   -- JSON: the answer as the client got it; NULL when none came
);
CREATE INDEX kept_requests_key ON kept_requests (key_id, at);
CREATE INDEX kept_requests_project ON kept_requests (project_id, at);
CREATE INDEX kept_requests_user ON kept_requests (user_id);
CREATE INDEX kept_requests_expires ON kept_requests (expires_at);
