"""The file server names the llmgw releases it holds at /_llmgw/releases/ (what GET /api/v1/releases reads); a
half-copied release (a hidden staging folder) is not named, and nothing else under _llmgw/ is listed."""

from __future__ import annotations

import aiohttp
import pytest

from llmgw.mirror.serve import build_file_app


@pytest.fixture
async def aiohttp_client_session():
    async with aiohttp.ClientSession() as session:
        yield session


async def test_the_releases_are_named_and_a_staging_folder_is_not(layout, h, aiohttp_client_session):
    releases = layout.root / "_llmgw" / "releases"
    for name in ("0.2.0", "0.10.1", ".staging-ab12"):
        (releases / name).mkdir(parents=True)
        (releases / name / "SHA256SUMS").write_text("")
    runner, base = await h.start_app(build_file_app(layout))
    try:
        async with aiohttp_client_session.get(f"{base}/_llmgw/releases/") as r:
            assert r.status == 200 and await r.json() == {"releases": ["0.10.1", "0.2.0"]}
        async with aiohttp_client_session.get(f"{base}/_llmgw/releases") as r:
            assert r.status == 200
        async with aiohttp_client_session.get(f"{base}/_llmgw/releases/0.2.0/") as r:
            assert r.status == 404  # a release's own folder is not listed: its SHA256SUMS says what is in it
        async with aiohttp_client_session.get(f"{base}/") as r:
            assert (await r.json())["models"] == []  # and a release is not a model
    finally:
        await runner.cleanup()


async def test_a_mirror_without_releases_answers_not_found(layout, h, aiohttp_client_session):
    runner, base = await h.start_app(build_file_app(layout))
    try:
        async with aiohttp_client_session.get(f"{base}/_llmgw/releases/") as r:
            assert r.status == 404
    finally:
        await runner.cleanup()
