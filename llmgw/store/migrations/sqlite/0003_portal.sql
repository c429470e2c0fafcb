-- llmgw store, SQLite dialect: the portal's sign-in sessions and password reset links.
-- Neither keeps a secret in clear: a session's cookie and a reset link's
-- token are kept as their SHA-256 (hex), so a copy of the store signs no
-- one in. Times are text, as in 0001.

CREATE TABLE web_sessions (
    token_hash    TEXT PRIMARY KEY,        -- sha256 hex of the cookie's value
    user_id       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    csrf_token    TEXT NOT NULL,           -- what every form of this session must carry
    created_at    TEXT NOT NULL,
    last_seen_at  TEXT NOT NULL,           -- for the idle timeout (auth.session_idle)
    expires_at    TEXT NOT NULL,           -- created_at + auth.session_ttl
    client        TEXT NOT NULL,           -- the address it was opened from
    user_agent    TEXT NOT NULL,
    chat_key_id   TEXT                     -- the short-lived key of its chat page, revoked with it
);
CREATE INDEX web_sessions_user ON web_sessions (user_id);
CREATE INDEX web_sessions_expires ON web_sessions (expires_at);

CREATE TABLE password_resets (
    token_hash  TEXT PRIMARY KEY,          -- sha256 hex of the link's token
    user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at  TEXT NOT NULL,
    expires_at  TEXT NOT NULL,
    used_at     TEXT                       -- set when spent; a link works once
);
CREATE INDEX password_resets_user ON password_resets (user_id);
