-- llmgw store, PostgreSQL dialect: the routing profile a scope's keys are routed by (llmgw.router.routing_profiles:
-- latency-first, cost-first, pinned:POOL or one of server.yaml's router.profiles); NULL when the scope sets none.
-- The narrowest scope over a key that sets one (key, project, organization) is the key's.

ALTER TABLE scope_rules ADD COLUMN routing TEXT;
