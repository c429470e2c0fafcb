-- llmgw store, SQLite dialect: what the guardrails did to each request.
-- The action (flagged, redacted, blocked, shadow-…), the policies that
-- applied, the category and the time the checks took. Never the text, a
-- matched value or the placeholder map of a redaction. Empty (NULL) when no
-- policy applied.

ALTER TABLE usage ADD COLUMN guard_action TEXT;
ALTER TABLE usage ADD COLUMN guard_policy TEXT;
ALTER TABLE usage ADD COLUMN guard_category TEXT;
ALTER TABLE usage ADD COLUMN guard_ms INTEGER;
