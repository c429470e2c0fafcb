-- llmgw store, SQLite dialect: the portal's mail, queued until the SMTP server takes it.
-- A message is sent once: a control plane claims it by moving next_at
-- forward before it sends, so another one does not send it too. A refused
-- or failed attempt is tried again later (next_at); once it is sent, or
-- given up (failed_at), its body is emptied, so a reset link in it is kept
-- no longer than it waits. last_error is the server's answer, never the body.

CREATE TABLE mail_outbox (
    id          TEXT PRIMARY KEY,          -- mail-…
    kind        TEXT NOT NULL,             -- reset_link, approved, budget
    to_addr     TEXT NOT NULL,
    subject     TEXT NOT NULL,
    body        TEXT NOT NULL,             -- '' once sent or given up
    created_at  TEXT NOT NULL,
    next_at     TEXT,                      -- when it is tried next; NULL once sent or given up
    attempts    INTEGER NOT NULL DEFAULT 0,
    sent_at     TEXT,
    failed_at   TEXT,
    last_error  TEXT
);
CREATE INDEX mail_outbox_next ON mail_outbox (next_at);
CREATE INDEX mail_outbox_created ON mail_outbox (created_at);
