-- llmgw store, PostgreSQL dialect: the externalId a SCIM client gave a person or a
-- team of one organization (its own id for them at the identity provider), kept
-- so it is given back. resource_kind 'user' names a users row, 'team' a teams row.

CREATE TABLE scim_external_ids (
    org_id         TEXT NOT NULL REFERENCES orgs (id) ON DELETE CASCADE,
    resource_kind  TEXT NOT NULL CHECK (resource_kind IN ('user', 'team')),
    resource_id    TEXT NOT NULL,
    external_id    TEXT NOT NULL,
    PRIMARY KEY (org_id, resource_kind, resource_id)
);
