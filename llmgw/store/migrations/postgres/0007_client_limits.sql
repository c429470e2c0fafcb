-- llmgw store, PostgreSQL dialect: limits on what one client keeps.
-- An uploaded file's bytes in pieces of at most 1 MiB (file_chunks), so an
-- upload goes into the store and comes out of it a piece at a time, never
-- whole in memory; files.content is then empty. And each project's own
-- storage quota, over the server's router.clients.project_storage_bytes
-- (NULL: the server's).

CREATE TABLE file_chunks (
    file_id      TEXT NOT NULL,
    seq          BIGINT NOT NULL,               -- 0 for the first piece
    data         BYTEA NOT NULL,
    PRIMARY KEY (file_id, seq)
);

ALTER TABLE project_features ADD COLUMN storage_quota_bytes BIGINT;
