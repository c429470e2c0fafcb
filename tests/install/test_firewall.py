"""The table inet llmgw: nft accepts it, and in a network namespace of its own it applies, lists and goes."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest

from llmgw.install import firewall


def _control_plane_rules() -> str:
    openings = firewall.control_plane_openings(
        listen=":8080", admin_listen="127.0.0.1:9090", agent_listen=":7443", metrics_listen=":9091",
        admin_from=firewall.parse_networks(["10.0.0.0/24", "fd00::/64"], "--admin-from"),
        nodes_from=firewall.parse_networks(["10.0.1.0/24"], "--nodes-from"),
        mirror_listen=":8081", mirror_api_listen="127.0.0.1:8082",
    )
    return firewall.ruleset([*openings, *firewall.node_openings(["10.0.0.140"])], title="test")


def test_the_rules_say_who_reaches_each_port():
    text = _control_plane_rules()
    assert text.startswith(firewall.HEADER)
    assert 'tcp dport 8080 accept comment "client API: open"' in text
    assert "tcp dport 9090 ip saddr { 10.0.0.0/24 } accept" in text
    assert "tcp dport 9090 ip6 saddr { fd00::/64 } accept" in text
    assert 'tcp dport 9090 drop' in text
    assert "tcp dport 7443 ip saddr { 10.0.1.0/24 } accept" in text and "tcp dport 7443 drop" in text
    assert 'tcp dport 9091 drop comment "metrics: loopback only"' in text
    assert "tcp dport 20000-20999 ip saddr { 10.0.0.140/32 } accept" in text
    assert "policy accept" in text  # only llmgw's own ports are ever dropped
    assert text.index("delete table inet llmgw") < text.index("table inet llmgw {")


def test_a_bad_network_names_the_flag():
    with pytest.raises(ValueError, match="--admin-from 'ten': not an address or a network"):
        firewall.parse_networks(["ten"], "--admin-from")


def test_nft_accepts_the_file(tmp_path):
    if shutil.which("nft") is None:
        pytest.skip("nft is not installed (apt-get install nftables)")
    path = tmp_path / "llmgw.nft"
    path.write_text(_control_plane_rules())
    try:
        firewall.check_ruleset(path)
    except firewall.FirewallError as exc:
        if "Operation not permitted" in str(exc):
            pytest.skip(f"nft -c needs CAP_NET_ADMIN here: {exc}")
        raise


@pytest.mark.slow
def test_the_table_applies_lists_and_is_deleted_in_a_namespace_of_its_own(tmp_path):
    if shutil.which("nft") is None or shutil.which("ip") is None or os.geteuid() != 0:
        pytest.skip("needs root, nft and ip (apt-get install nftables iproute2)")
    ns = f"llmgw-test-{uuid.uuid4().hex[:8]}"
    made = subprocess.run(["ip", "netns", "add", ns], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"ip netns add is not allowed here: {made.stderr.strip()}")
    try:
        path = tmp_path / "llmgw.nft"
        path.write_text(_control_plane_rules())
        firewall.apply_ruleset(path, netns=ns)
        firewall.apply_ruleset(path, netns=ns)  # applied twice: replaced, not doubled
        listed = subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "table", "inet", "llmgw"],
                                capture_output=True, text=True, check=True).stdout
        assert listed.count("tcp dport 9090 drop") == 1
        assert "10.0.0.0/24" in listed
        assert firewall.remove_table(netns=ns) is True
        assert firewall.table_applied(netns=ns) is False
        assert firewall.remove_table(netns=ns) is False
    finally:
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
