-- llmgw store, PostgreSQL dialect: a project that wants a request asking for
-- more answer tokens than the model's context leaves refused (400), not
-- fitted.

ALTER TABLE project_features ADD COLUMN strict_max_tokens BOOLEAN NOT NULL DEFAULT FALSE;
