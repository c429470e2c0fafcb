-- llmgw store, PostgreSQL dialect: answers of the Responses API kept for `previous_response_id`.
-- Each row is one answer: the conversation that led to it and the answer
-- itself, as chat messages, so a follow-up naming it continues the
-- conversation; and the response object as the client got it. Rows expire
-- (expires_at) and the gateway prunes the oldest beyond a count: the table
-- stays bounded. `scope` is who may continue an answer: its project, else
-- its key ('' when the gateway takes no keys). The JSON is kept as text: it
-- is only ever read back whole.

CREATE TABLE responses (
    id          TEXT PRIMARY KEY,          -- resp_…
    scope       TEXT NOT NULL,
    model       TEXT NOT NULL,             -- the model asked for
    messages    TEXT NOT NULL,             -- JSON: chat messages, the answer last
    response    TEXT NOT NULL,             -- JSON: the response object
    created_at  TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX responses_created ON responses (created_at);
CREATE INDEX responses_expires ON responses (expires_at);
