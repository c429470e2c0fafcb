"""Certificates for the channel tests: one CA, a server for 127.0.0.1, two nodes, and a stranger."""

from __future__ import annotations

import socket

import attrs
import pytest

from llmgw import pki


@attrs.frozen
class ClusterCerts:
    ca: pki.IssuedFiles
    server: pki.IssuedFiles
    node_a: pki.IssuedFiles
    node_b: pki.IssuedFiles
    stranger: pki.IssuedFiles  #: a node certificate from another CA

    def server_context(self):
        return pki.ssl_server_context(self.server.cert, self.server.key, self.server.ca)

    def node_context(self, files: pki.IssuedFiles | None = None):
        files = files or self.node_a
        return pki.ssl_client_context(files.cert, files.key, self.ca.cert)


@pytest.fixture(scope="session")
def test_pki(tmp_path_factory) -> ClusterCerts:
    root = tmp_path_factory.mktemp("pki")
    ca = pki.init_ca(root / "ca", "test cluster CA")
    server = pki.issue_server(root / "ca", "control", ["127.0.0.1", "localhost"], root / "server")
    node_a = pki.issue_node(root / "ca", "node-a", root / "node-a")
    node_b = pki.issue_node(root / "ca", "node-b", root / "node-b")
    pki.init_ca(root / "other-ca", "someone else's CA")
    stranger = pki.issue_node(root / "other-ca", "node-a", root / "stranger")
    return ClusterCerts(ca=ca, server=server, node_a=node_a, node_b=node_b, stranger=stranger)


@pytest.fixture
def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
