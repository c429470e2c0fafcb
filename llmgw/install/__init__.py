"""Installing llmgw on a machine: where its files go, its services, its firewall, and taking it off again.

layout.py says where everything is (or under `--root DIR`); service.py
writes the systemd units and starts them, directly where systemd does not
run; firewall.py writes the nftables table; init.py is `llmgw server init`,
wipe.py `llmgw wipe`, doctor.py `llmgw doctor`.
"""
