"""The join endpoint, on the agent port: a machine with a join code asks for its node certificate.

It needs no client certificate (the machine has none yet); the code's
secret is what admits it. The machine first reads the CA certificate from
`GET /join/v1/ca`, checks its fingerprint against the code's, then dials
again trusting only that CA and sends `POST /join/v1`:

    {"code": ID, "secret": SECRET, "node": NAME, "csr": PEM}
    -> 200 {"node": NAME, "cert": PEM, "ca": PEM, "control_planes": [ADDRESS, ...]}
    -> 4xx {"error": "a sentence"}

The certificate is signed with the cluster CA's key: `ca-key.pem` beside
agent_tls.ca, or in the `ca` directory beside agent_tls.ca's (where
`llmgw server init` keeps it: /etc/llmgw/ca beside /etc/llmgw/tls).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from llmgw.control.join_codes import JoinCodeError, JoinCodes
from llmgw.pki.certs import CA_CERT, CA_KEY, InvalidName, PkiError, validate_node_id
from llmgw.pki.csr import issue_from_request

__all__ = ["CA_PATH", "JOIN_PATH", "JoinEndpoint"]

log = logging.getLogger("llmgw.control")

JOIN_PATH = "/join/v1"
CA_PATH = "/join/v1/ca"
MAX_BODY = 64 * 1024


class JoinEndpoint:
    def __init__(self, codes: JoinCodes, ca_cert: str, *, control_planes: Callable[[], Awaitable[list[str]]],
                 connected: Callable[[str], bool]) -> None:
        self.codes = codes
        self.ca_cert = Path(ca_cert)
        self.control_planes = control_planes
        self.connected = connected

    def routes(self) -> list[web.RouteDef]:
        return [web.get(CA_PATH, self.handle_ca), web.post(JOIN_PATH, self.handle_join)]

    def ca_dir(self) -> Path | None:
        """Where the CA's key is: the directory whose ca.pem is agent_tls.ca's certificate and holds ca-key.pem."""
        try:
            wanted = self.ca_cert.read_bytes().strip()
        except OSError:
            return None
        for d in (self.ca_cert.parent, self.ca_cert.parent.parent / "ca"):
            try:
                if (d / CA_KEY).is_file() and (d / CA_CERT).read_bytes().strip() == wanted:
                    return d
            except OSError:
                continue
        return None

    async def handle_ca(self, request: web.Request) -> web.Response:
        try:
            return web.Response(body=self.ca_cert.read_bytes(), content_type="application/x-pem-file")
        except OSError as exc:
            return _error(503, f"this control plane cannot read its CA certificate {self.ca_cert}: {exc.strerror}")

    async def handle_join(self, request: web.Request) -> web.Response:
        peer = request.remote or "?"
        try:
            body = await request.json(loads=_loads)
        except ValueError:
            return _error(400, "the join request must be a JSON object")
        if request.content_length is not None and request.content_length > MAX_BODY:
            return _error(413, "the join request is too large")
        if not isinstance(body, dict) or not all(isinstance(body.get(k), str) for k in ("code", "secret", "node", "csr")):
            return _error(400, "the join request needs code, secret, node and csr, each a string")
        node = body["node"]
        try:
            validate_node_id(node, what="node name")
        except InvalidName as exc:
            return _error(400, str(exc))
        ca_dir = self.ca_dir()
        if ca_dir is None:
            return _error(503, f"this control plane cannot sign node certificates: the CA's key is neither beside "
                          f"agent_tls.ca ({self.ca_cert.parent / CA_KEY}) nor in {self.ca_cert.parent.parent / 'ca'}; "
                          "join through the control plane that holds it")
        if self.connected(node):
            return _error(409, f"a node called {node!r} is connected now; pick another --name, or remove that "
                          "node first (`llmgw ctl node remove`) if this machine replaces it")
        # Signed before the code is taken, so a bad request does not use the code up; the
        # certificate is handed out only once the code is taken.
        try:
            cert, ca = issue_from_request(ca_dir, body["csr"].encode(), node)
        except PkiError as exc:
            return _error(400, f"the certificate could not be issued: {exc}")
        try:
            await self.codes.use(body["code"], body["secret"], node=node, peer=peer)
        except JoinCodeError as exc:
            log.warning("join refused: %s", exc, extra={"fields": {"peer": peer, "node": node}})
            return _error(exc.status, str(exc))
        addresses = await self.control_planes()
        log.info("node joined", extra={"fields": {"node": node, "peer": peer}})
        return web.json_response({"node": node, "cert": cert.decode(), "ca": ca.decode(),
                                  "control_planes": addresses})


def _loads(text: str):
    import json

    return json.loads(text)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)
