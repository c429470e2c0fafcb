"""What /scim/v2 says about itself: ServiceProviderConfig, Schemas and ResourceTypes (RFC 7643).

Only the attributes this server keeps are published, so a client (or a
conformance checker) never sends one that would be dropped: a User is its
userName (the person's email address), displayName, active and the groups
it is in; a Group is a team of the token's organization, its displayName
and members.
"""

from __future__ import annotations

from typing import Any

USER = "urn:ietf:params:scim:schemas:core:2.0:User"
GROUP = "urn:ietf:params:scim:schemas:core:2.0:Group"
LIST = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
PATCH = "urn:ietf:params:scim:api:messages:2.0:PatchOp"
ERROR = "urn:ietf:params:scim:api:messages:2.0:Error"
SPC = "urn:ietf:params:scim:schemas:core:2.0:ServiceProviderConfig"
SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Schema"
RESOURCE_TYPE = "urn:ietf:params:scim:schemas:core:2.0:ResourceType"

#: The most resources one list answer holds.
MAX_RESULTS = 200


def _attr(name: str, type_: str = "string", *, required: bool = False, mutability: str = "readWrite",
          returned: str = "default", uniqueness: str = "none", multi: bool = False, description: str = "",
          sub: list[dict] | None = None, reference_types: list[str] | None = None) -> dict[str, Any]:
    a: dict[str, Any] = {
        "name": name, "type": type_, "multiValued": multi, "description": description, "required": required,
        "mutability": mutability, "returned": returned,
    }
    if type_ in ("string", "reference"):
        a["caseExact"] = False
        a["uniqueness"] = uniqueness
    if sub is not None:
        a["subAttributes"] = sub
    if reference_types is not None:
        a["referenceTypes"] = reference_types
    return a


def _member_sub(ref_types: list[str], *, writable: bool) -> list[dict]:
    mut = "immutable" if writable else "readOnly"
    sub = [
        _attr("value", mutability=mut, description="The id of the member."),
        _attr("$ref", "reference", mutability=mut, reference_types=ref_types, description="The member's URI."),
    ]
    if not writable:
        sub.append(_attr("display", mutability="readOnly", description="The team's name."))
    return sub


USER_SCHEMA = {
    "schemas": [SCHEMA], "id": USER, "name": "User", "description": "A person who may use the gateway.",
    "attributes": [
        _attr("userName", required=True, uniqueness="server",
              description="The person's email address; they sign in with it."),
        _attr("displayName", description="The name shown for the person."),
        _attr("active", "boolean", required=True,
              description="false suspends the person: their keys stop at once (left out: true)."),
        _attr("groups", "complex", multi=True, mutability="readOnly",
              description="The teams the person is in.", sub=_member_sub(["Group"], writable=False)),
    ],
    "meta": {"resourceType": "Schema", "location": "/scim/v2/Schemas/" + USER},
}

GROUP_SCHEMA = {
    "schemas": [SCHEMA], "id": GROUP, "name": "Group", "description": "A team of the organization.",
    "attributes": [
        _attr("displayName", required=True, uniqueness="server", description="The team's name."),
        _attr("members", "complex", multi=True, description="The people in the team.",
              sub=_member_sub(["User"], writable=True)),
    ],
    "meta": {"resourceType": "Schema", "location": "/scim/v2/Schemas/" + GROUP},
}

SCHEMAS = {USER: USER_SCHEMA, GROUP: GROUP_SCHEMA}


def resource_types(base: str) -> list[dict[str, Any]]:
    return [
        {"schemas": [RESOURCE_TYPE], "id": "User", "name": "User", "endpoint": "/Users",
         "description": "People", "schema": USER, "schemaExtensions": [],
         "meta": {"resourceType": "ResourceType", "location": base + "/ResourceTypes/User"}},
        {"schemas": [RESOURCE_TYPE], "id": "Group", "name": "Group", "endpoint": "/Groups",
         "description": "Teams", "schema": GROUP, "schemaExtensions": [],
         "meta": {"resourceType": "ResourceType", "location": base + "/ResourceTypes/Group"}},
    ]


def service_provider_config(base: str) -> dict[str, Any]:
    return {
        "schemas": [SPC],
        "documentationUri": base.removesuffix("/scim/v2") + "/docs/sso",
        "patch": {"supported": True},
        "bulk": {"supported": False, "maxOperations": 0, "maxPayloadSize": 0},
        "filter": {"supported": True, "maxResults": MAX_RESULTS},
        "changePassword": {"supported": False},
        "sort": {"supported": False},
        "etag": {"supported": True},
        "authenticationSchemes": [{
            "type": "oauthbearertoken", "name": "Bearer token",
            "description": "The organization's SCIM token, made with llmgw org scim-token ORG.",
            "primary": True,
        }],
        "meta": {"resourceType": "ServiceProviderConfig", "location": base + "/ServiceProviderConfig"},
    }


def with_location(schema: dict[str, Any], base: str) -> dict[str, Any]:
    return {**schema, "meta": {**schema["meta"], "location": base + "/Schemas/" + schema["id"]}}
