"""Copies to an S3-compatible bucket (`s3://bucket/prefix` in backup.copy_to): signed requests of our own.

Four requests are all a copy needs (PUT, HEAD, a listing, DELETE), each
signed with AWS Signature Version 4 over aiohttp, which llmgw already has;
a full SDK (boto3 and botocore, tens of megabytes) would grow the zipapp
for that. It works with AWS S3 and with S3-compatible stores (MinIO, Ceph,
Garage …) addressed path-style: `backup.s3_endpoint/bucket/key`.

An upload is one PUT of the whole archive (S3 takes up to 5 GiB in one),
signed over its sha256: the store refuses a body that does not hash to it,
so what is stored is what was sent. The archive's length is checked with
HEAD after it is written, its `NAME.sha256` put beside it, and the oldest
archives under the prefix beyond backup.keep deleted.

The credentials file is AWS's own format (the `[default]` profile, or the
first one, with `aws_access_key_id` and `aws_secret_access_key`, and
`aws_session_token` when there is one).
"""

from __future__ import annotations

import configparser
import datetime as dt
import hashlib
import hmac
import os
import urllib.parse
import xml.etree.ElementTree as ET
from typing import Any

import attrs

from llmgw.backup.archive import BackupError, _name_key, is_archive_name

__all__ = ["S3Client", "S3Credentials", "read_credentials"]

TIMEOUT_S = 3600.0
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


@attrs.frozen(kw_only=True)
class S3Credentials:
    access_key: str
    secret_key: str = attrs.field(repr=False)
    session_token: str = attrs.field(default="", repr=False)


def read_credentials(path: str) -> S3Credentials:
    """The keys in an AWS-style credentials file; BackupError naming backup.s3_credentials_file otherwise."""
    parser = configparser.ConfigParser()
    try:
        with open(os.path.expanduser(path), encoding="utf-8") as f:
            parser.read_file(f)
    except OSError as exc:
        raise BackupError(f"backup.s3_credentials_file: cannot read {path}: {exc.strerror or exc}") from None
    except configparser.Error:
        raise BackupError(f"backup.s3_credentials_file: {path} is not a credentials file ([default] with "
                          "aws_access_key_id and aws_secret_access_key)") from None
    sections = parser.sections()
    name = "default" if "default" in sections else (sections[0] if sections else None)
    section = parser[name] if name else {}
    access, secret = section.get("aws_access_key_id", "").strip(), section.get("aws_secret_access_key", "").strip()
    if not access or not secret:
        raise BackupError(f"backup.s3_credentials_file: {path} has no aws_access_key_id and "
                          "aws_secret_access_key (under [default])")
    return S3Credentials(access_key=access, secret_key=secret,
                         session_token=section.get("aws_session_token", "").strip())


def _quote(text: str, safe: str = "") -> str:
    return urllib.parse.quote(text, safe="-_.~" + safe)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


class S3Client:
    """Path-style requests to one bucket of an S3-compatible endpoint, signed with SigV4."""

    def __init__(self, endpoint: str, region: str, credentials: S3Credentials, bucket: str) -> None:
        url = urllib.parse.urlsplit(endpoint.rstrip("/"))
        self.base = f"{url.scheme}://{url.netloc}"
        self.host = url.netloc
        self.region = region or "us-east-1"
        self.credentials = credentials
        self.bucket = bucket

    def _sign(self, method: str, path: str, query: dict[str, str], payload_sha256: str,
              extra: dict[str, str], now: dt.datetime) -> dict[str, str]:
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        headers = {"host": self.host, "x-amz-content-sha256": payload_sha256, "x-amz-date": amz_date,
                   **{k.lower(): v for k, v in extra.items()}}
        if self.credentials.session_token:
            headers["x-amz-security-token"] = self.credentials.session_token
        names = sorted(headers)
        canonical = "\n".join([
            method, _quote(path, "/"),
            "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items())),
            "".join(f"{n}:{' '.join(headers[n].split())}\n" for n in names),
            ";".join(names), payload_sha256])
        scope = f"{day}/{self.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        key = _hmac(_hmac(_hmac(_hmac(f"AWS4{self.credentials.secret_key}".encode(), day), self.region), "s3"),
                    "aws4_request")
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.credentials.access_key}/{scope}, "
                                    f"SignedHeaders={';'.join(names)}, Signature={signature}")
        del headers["host"]
        return headers

    async def request(self, method: str, key: str = "", *, query: dict[str, str] | None = None,
                      body: Any = None, payload_sha256: str = EMPTY_SHA256,
                      headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        import aiohttp
        import yarl

        path = f"/{self.bucket}" + (f"/{key}" if key else "")
        query = query or {}
        signed = self._sign(method, path, query, payload_sha256, headers or {}, dt.datetime.now(dt.UTC))
        url = self.base + _quote(path, "/") + ("?" + "&".join(f"{_quote(k)}={_quote(v)}"
                                                              for k, v in sorted(query.items())) if query else "")
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_S, sock_connect=15)
        try:
            async with aiohttp.ClientSession(timeout=timeout) as session, \
                    session.request(method, yarl.URL(url, encoded=True), data=body, headers=signed) as r:
                return r.status, dict(r.headers), await r.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise BackupError(f"{self.base} cannot be reached: {exc}") from None

    @staticmethod
    def _said(status: int, body: bytes) -> str:
        try:
            root = ET.fromstring(body)
            code, message = root.findtext("Code") or "", root.findtext("Message") or ""
            return f"HTTP {status} {code}: {message}".strip(": ")
        except ET.ParseError:
            return f"HTTP {status}"

    async def put_file(self, key: str, path: str, sha256: str) -> None:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            status, _, body = await self.request("PUT", key, body=f, payload_sha256=sha256,
                                                 headers={"content-length": str(size),
                                                          "content-type": "application/octet-stream"})
        if status != 200:
            raise BackupError(f"s3://{self.bucket}/{key} was not stored ({self._said(status, body)})")
        status, headers, _ = await self.request("HEAD", key)
        length = {k.lower(): v for k, v in headers.items()}.get("content-length")
        if status != 200 or length != str(size):
            raise BackupError(f"s3://{self.bucket}/{key} reads back as {length} bytes (HTTP {status}), not {size}")

    async def put_bytes(self, key: str, data: bytes) -> None:
        status, _, body = await self.request("PUT", key, body=data, payload_sha256=hashlib.sha256(data).hexdigest(),
                                             headers={"content-length": str(len(data)),
                                                      "content-type": "text/plain"})
        if status != 200:
            raise BackupError(f"s3://{self.bucket}/{key} was not stored ({self._said(status, body)})")

    async def list_keys(self, prefix: str) -> list[str]:
        keys: list[str] = []
        token = ""
        ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
        while True:
            query = {"list-type": "2", "prefix": prefix}
            if token:
                query["continuation-token"] = token
            status, _, body = await self.request("GET", query=query)
            if status != 200:
                raise BackupError(f"s3://{self.bucket}/{prefix} cannot be listed ({self._said(status, body)})")
            root = ET.fromstring(body)
            keys += [c.findtext(f"{ns}Key") or c.findtext("Key") or ""
                     for c in root.iter() if c.tag in (f"{ns}Contents", "Contents")]
            token = root.findtext(f"{ns}NextContinuationToken") or root.findtext("NextContinuationToken") or ""
            if not token:
                return keys

    async def delete(self, key: str) -> None:
        status, _, body = await self.request("DELETE", key)
        if status not in (200, 204):
            raise BackupError(f"s3://{self.bucket}/{key} could not be deleted ({self._said(status, body)})")


async def copy_to_bucket(config: Any, bucket: str, prefix: str, archive: str, digest: str, keep: int) -> list[str]:
    """Put `archive` and its NAME.sha256 under `prefix` and delete the oldest beyond `keep`; the names deleted."""
    b = config.backup
    client = S3Client(b.s3_endpoint, b.s3_region, read_credentials(b.s3_credentials_file), bucket)
    name = os.path.basename(archive)
    folder = prefix.strip("/")
    at = f"{folder}/" if folder else ""
    await client.put_file(at + name, archive, digest)
    await client.put_bytes(at + name + ".sha256", f"{digest}  {name}\n".encode())
    if keep <= 0:
        return []
    names = [k[len(at):] for k in await client.list_keys(at) if "/" not in k[len(at):]]
    archives = sorted((n for n in names if is_archive_name(n)), key=lambda n: _name_key(n) or ("", 0), reverse=True)
    old = [n for n in archives[keep:] if n != name]
    for n in old:
        await client.delete(at + n)
        if n + ".sha256" in names:
            await client.delete(at + n + ".sha256")
    return old
