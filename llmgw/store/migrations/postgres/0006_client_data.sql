-- llmgw store, PostgreSQL dialect: what clients keep with the gateway.
-- Per-project switches (threads, memory notes, the answer cache), stored
-- conversations, agents' memory notes, the Files API's files (their bytes
-- in the store, so a backup of the store carries them) and the Batch API's
-- batches with the results of the lines done so far. Rows name their
-- project (or owner) without a foreign key, as usage rows do: a thread or a
-- file is forgotten by its retention or its endpoint, not by the tree.

CREATE TABLE project_features (
    project_id           TEXT PRIMARY KEY,
    threads              BOOLEAN NOT NULL,
    thread_retention_s   BIGINT NOT NULL,      -- kept this long after the last turn
    memory               BOOLEAN NOT NULL,
    cache                BOOLEAN NOT NULL,
    cache_ttl_s          BIGINT NOT NULL,
    updated_at           TIMESTAMPTZ NOT NULL,
    actor                TEXT NOT NULL
);

CREATE TABLE threads (
    project_id   TEXT NOT NULL,
    thread_id    TEXT NOT NULL,                -- the client's x-llmgw-thread
    created_at   TIMESTAMPTZ NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (project_id, thread_id)
);
CREATE INDEX threads_expires ON threads (expires_at);

CREATE TABLE thread_turns (
    project_id   TEXT NOT NULL,
    thread_id    TEXT NOT NULL,
    seq          BIGINT NOT NULL,
    messages     TEXT NOT NULL,                -- JSON: the turn's chat messages, the answer last
    tokens       BIGINT NOT NULL,              -- an estimate
    created_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (project_id, thread_id, seq)
);

CREATE TABLE memory_notes (
    project_id   TEXT NOT NULL,
    agent        TEXT NOT NULL,                -- x-llmgw-agent, 'default' when not sent
    key          TEXT NOT NULL,
    text         TEXT NOT NULL,
    tags         TEXT NOT NULL,                -- JSON list
    search       TEXT NOT NULL,                -- key and text in lower case, what ?q= matches
    created_at   TIMESTAMPTZ NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (project_id, agent, key)
);

CREATE TABLE files (
    id           TEXT PRIMARY KEY,             -- file-…
    owner        TEXT NOT NULL,                -- project id, else person id, else 'anonymous'
    purpose      TEXT NOT NULL CHECK (purpose IN ('batch', 'batch_output')),
    filename     TEXT NOT NULL,
    bytes        BIGINT NOT NULL,
    content      BYTEA NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ                   -- NULL: until deleted
);
CREATE INDEX files_owner ON files (owner, created_at);
CREATE INDEX files_expires ON files (expires_at);

CREATE TABLE batches (
    id                 TEXT PRIMARY KEY,       -- batch_…
    owner              TEXT NOT NULL,
    key_id             TEXT NOT NULL,
    principal          TEXT NOT NULL,          -- JSON: who submitted it
    endpoint           TEXT NOT NULL,
    completion_window  TEXT NOT NULL,
    input_file_id      TEXT NOT NULL,
    output_file_id     TEXT,
    error_file_id      TEXT,
    status             TEXT NOT NULL CHECK (status IN ('validating', 'failed', 'in_progress', 'finalizing',
                                                        'completed', 'expired', 'cancelling', 'cancelled')),
    total              BIGINT NOT NULL,
    completed          BIGINT NOT NULL,
    failed             BIGINT NOT NULL,
    errors             TEXT,                   -- JSON list: why it failed validation
    metadata           TEXT,                   -- JSON map
    created_at         TIMESTAMPTZ NOT NULL,
    expires_at         TIMESTAMPTZ NOT NULL,
    in_progress_at     TIMESTAMPTZ,
    finalizing_at      TIMESTAMPTZ,
    completed_at       TIMESTAMPTZ,
    failed_at          TIMESTAMPTZ,
    expired_at         TIMESTAMPTZ,
    cancelling_at      TIMESTAMPTZ,
    cancelled_at       TIMESTAMPTZ
);
CREATE INDEX batches_owner ON batches (owner, created_at);
CREATE INDEX batches_status ON batches (status, created_at);

-- The lines of a batch done so far; gathered into its output and error files when it ends.
CREATE TABLE batch_results (
    batch_id     TEXT NOT NULL,
    line         BIGINT NOT NULL,
    custom_id    TEXT NOT NULL,
    ok           BOOLEAN NOT NULL,
    text         TEXT NOT NULL,                -- the JSON line of the output or error file
    PRIMARY KEY (batch_id, line)
);
