"""A model registry in Hugging Face's API shape.

- `GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true`: the
  commit a revision is at (`sha`) and its files (`siblings`: `rfilename`,
  `size`, `blobId`, and `lfs.sha256` for files kept in LFS — the weights).
- `GET {endpoint}/{repo}/resolve/{commit}/{path}`: a file's bytes.
- `GET {endpoint}/api/models?search=…&sort=…`: search.

The endpoint is `--registry`, else `$HF_ENDPOINT`, else huggingface.co; a
token in `$HF_TOKEN` is sent as a Bearer header and never written anywhere.
Files are always fetched at the commit, not at `main`, so a push while a
download runs cannot mix two revisions in one version.
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import quote, urlencode

import attrs

from llmgw.mirror.safefetch import FetchError, SafeFetcher

DEFAULT_ENDPOINT = "https://huggingface.co"
SORTS = {"trending": "trendingScore", "downloads": "downloads", "likes": "likes", "newest": "createdAt"}

_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*(/[A-Za-z0-9][A-Za-z0-9._\-]*)?")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/\-]{0,199}")


class RegistryError(Exception):
    """The registry could not answer, or answered something unusable."""


@attrs.frozen
class RepoFile:
    path: str
    size: int | None
    sha256: str = ""  # LFS files only; others are hashed when fetched
    blob_id: str = ""


@attrs.frozen
class RepoRevision:
    repo: str
    requested: str  # what was asked: main, a tag, a commit
    commit: str
    files: tuple[RepoFile, ...]


@attrs.frozen
class RepoSummary:
    repo: str
    downloads: int = 0
    likes: int = 0
    trending: float = 0.0
    created_at: str = ""
    last_modified: str = ""


def parse_repo(source: str) -> tuple[str, str]:
    """`org/repo[@revision]` → (repo, revision); revision `main` when not given."""
    repo, _, revision = source.partition("@")
    if not _REPO.fullmatch(repo) or ".." in repo:
        raise RegistryError(f"{source!r} is not a registry repository like org/name or org/name@revision")
    revision = revision or "main"
    if not _REVISION.fullmatch(revision) or ".." in revision:
        raise RegistryError(f"{source!r}: {revision!r} is not a revision (a branch, tag or commit)")
    return repo, revision


def default_endpoint(flag: str | None = None) -> str:
    return (flag or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


class Registry:
    """Hugging Face's API, or another speaking its shape (`mirror.registry`)."""

    def __init__(self, fetcher: SafeFetcher, endpoint: str | None = None, token: str | None = None) -> None:
        self.fetcher = fetcher
        self.endpoint = default_endpoint(endpoint)
        self._token = token if token is not None else os.environ.get("HF_TOKEN") or None

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def file_url(self, repo: str, revision: str, path: str) -> str:
        return f"{self.endpoint}/{quote(repo)}/resolve/{quote(revision, safe='')}/{quote(path)}"

    async def revision(self, repo: str, revision: str = "main") -> RepoRevision:
        """The commit `revision` is at and its files with sizes and checksums."""
        url = f"{self.endpoint}/api/models/{quote(repo)}/revision/{quote(revision, safe='')}?blobs=true"
        data = await self._json(url, f"{repo}@{revision}")
        commit = data.get("sha") if isinstance(data, dict) else None
        siblings = data.get("siblings") if isinstance(data, dict) else None
        if not isinstance(commit, str) or not isinstance(siblings, list):
            raise RegistryError(f"{repo}@{revision}: the registry's answer has no sha or siblings")
        files = []
        for entry in siblings:
            if not isinstance(entry, dict) or not isinstance(entry.get("rfilename"), str):
                continue
            lfs = entry.get("lfs") if isinstance(entry.get("lfs"), dict) else {}
            size = entry.get("size", lfs.get("size"))
            sha = lfs.get("sha256") or lfs.get("oid") or ""
            files.append(RepoFile(
                path=entry["rfilename"],
                size=int(size) if isinstance(size, int) else None,
                sha256=str(sha).lower(),
                blob_id=str(entry.get("blobId") or ""),
            ))
        return RepoRevision(repo=repo, requested=revision, commit=commit, files=tuple(files))

    async def search(self, query: str = "", *, sort: str = "trending", limit: int = 20) -> list[RepoSummary]:
        if sort not in SORTS:
            raise RegistryError(f"sort {sort!r}: one of {', '.join(SORTS)}")
        params = {"sort": SORTS[sort], "direction": "-1", "limit": str(max(1, min(limit, 100)))}
        if query:
            params["search"] = query
        data = await self._json(f"{self.endpoint}/api/models?{urlencode(params)}", "search")
        if not isinstance(data, list):
            raise RegistryError("search: the registry's answer is not a list")
        return [
            RepoSummary(
                repo=str(item.get("id") or item.get("modelId") or ""),
                downloads=int(item.get("downloads") or 0),
                likes=int(item.get("likes") or 0),
                trending=float(item.get("trendingScore") or 0),
                created_at=str(item.get("createdAt") or ""),
                last_modified=str(item.get("lastModified") or ""),
            )
            for item in data
            if isinstance(item, dict)
        ]

    async def _json(self, url: str, what: str) -> Any:
        try:
            return await self.fetcher.get_json(url, self.auth_headers())
        except FetchError as exc:
            hint = ""
            if " 401" in str(exc) or " 403" in str(exc):
                hint = " (a gated or private repository needs HF_TOKEN)"
            elif " 404" in str(exc):
                hint = " (no such repository or revision)"
            raise RegistryError(f"{what}: {exc}{hint}") from exc
