-- llmgw store, PostgreSQL dialect: the budget events already told, so each is
-- told once per budget period and threshold, by one gateway, even across
-- restarts. threshold: a share like '0.8' (budgets.notify_at), or 'refused'
-- when the budget refused a request. period_start: the UTC day or month the
-- event is of.

CREATE TABLE budget_notices (
    scope_kind    TEXT NOT NULL,
    scope_id      TEXT NOT NULL,
    period        TEXT NOT NULL CHECK (period IN ('day', 'month')),
    period_start  TIMESTAMPTZ NOT NULL,
    threshold     TEXT NOT NULL,
    told_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (scope_kind, scope_id, period, period_start, threshold)
);
