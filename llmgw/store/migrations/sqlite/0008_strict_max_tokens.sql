-- llmgw store, SQLite dialect: a project that wants a request asking for more
-- answer tokens than the model's context leaves refused (400), not fitted.
-- 0: fitted (the default), 1: refused.

ALTER TABLE project_features ADD COLUMN strict_max_tokens INTEGER NOT NULL DEFAULT 0;
