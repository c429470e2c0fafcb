"""scim2-tester (a SCIM 2.0 conformance checker from PyPI) against a running gateway's /scim/v2."""

from __future__ import annotations

import asyncio
import random
import sys
import uuid

import pytest

pytestmark = pytest.mark.slow


def _check(base: str, token: str) -> list:
    import httpx2
    import scim2_tester.filling as filling
    from scim2_client.engines.httpx2 import SyncSCIMClient
    import scim2_tester.checkers  # noqa: F401 - every checker module loaded, so each is told
    from scim2_tester import Status, check_server

    # Our userName is the person's email address (docs/sso.md). A SCIM schema cannot say so,
    # so the checker, which fills userName with a random UUID, is told to make addresses there.
    made = filling.generate_random_value

    def address_for_user_name(context, path, mutability=None, required=None):
        value = made(context, path, mutability=mutability, required=required)
        if str(path).lower().endswith("username") and isinstance(value, str):
            return f"{uuid.uuid4().hex[:12]}@example.com"
        return value

    users = [m for m in list(sys.modules.values())
             if getattr(m, "__name__", "").startswith("scim2_tester") and getattr(m, "generate_random_value", None) is made]
    for module in users:
        module.generate_random_value = address_for_user_name
    random.seed(20261201)
    try:
        with httpx2.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            client = SyncSCIMClient(http)
            results = check_server(client)
    finally:
        for module in users:
            module.generate_random_value = made
    return [(r.status.name, r.title, r.resource_type, r.reason) for r in results], Status


async def test_scim2_tester_finds_no_failures(scim_site):
    results, _ = await asyncio.to_thread(_check, scim_site.scim, scim_site.token)
    bad = [r for r in results if r[0] in ("ERROR", "CRITICAL")]
    assert results and not bad, "\n".join(map(str, bad))
    assert sum(1 for r in results if r[0] == "SUCCESS") > 20, results
