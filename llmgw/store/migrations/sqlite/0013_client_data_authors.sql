-- llmgw store, SQLite dialect: who wrote each turn of a thread and each memory note (the key's person; NULL for a
-- project's service key, and for rows kept before), so forgetting a person deletes what they wrote.

ALTER TABLE thread_turns ADD COLUMN user_id TEXT;
ALTER TABLE memory_notes ADD COLUMN user_id TEXT;
