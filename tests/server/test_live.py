"""The keys a running server takes up from a changed server.yaml, put into its gateway's parts."""

from __future__ import annotations

import attrs

from llmgw.config import parse_server_config
from llmgw.obs.metrics import GatewayMetrics
from llmgw.router.gateway import Gateway
from llmgw.router.replicas import static_replicas
from llmgw.server.live import LIVE_KEYS, GatewayLive


def gateway(config) -> Gateway:
    return Gateway(config, replicas=static_replicas(config), accountant=None, resolver=None,
                   metrics=GatewayMetrics())


def test_live_keys_reach_the_parts_that_read_them_and_nothing_else_changes():
    running = parse_server_config({})
    gw = gateway(running)
    new = parse_server_config({
        "listen": ":9999",
        "router": {"inject_usage": False, "retries": {"attempts": 5, "backoff": "1s"},
                   "timeouts": {"dial": "1s", "first_byte": "10s", "idle": "20s", "total": "0"},
                   "affinity": {"session": False, "prefix": False, "session_ttl": "1m"}},
        "admission": {"queue_depth": 3, "max_wait": "2s", "default_band": "gold"},
    })
    result, taken = GatewayLive(gw).apply(running, new)
    assert taken == [k for k in LIVE_KEYS if k.startswith(("router.", "admission."))]
    assert gw.config is result and result.listen == ":8080"  # a listener waits for a restart
    assert (result.router.retries.attempts, result.router.inject_usage) == (5, False)
    assert (gw.timeouts.first_byte, gw.timeouts.idle, gw.timeouts.total) == (10.0, 20.0, None)
    assert gw.timeouts.dial == 5.0 and gw.upstream.timeouts is gw.timeouts  # the pool was made with dial
    assert (gw.chooser.affinity.session, gw.chooser.affinity.prefix) == (False, False)
    assert gw.chooser.affinity.session_ttl == running.router.affinity.session_ttl
    assert (gw.admission.config.queue_depth, gw.admission.max_wait("silver")) == (3, 2.0)
    assert gw.admission.default_band == "gold" and gw.admission.band_name(None) == "gold"
    assert attrs.evolve(result, listen=new.listen, router=new.router, admission=new.admission) == new


def with_parts(gw: Gateway, *, guard: bool = True):
    """The gateway with the parts the other live keys reach: llmgw's rate limiter, guardrails, a portal and a
    control plane's reconciler (stand-ins where the real ones need a store)."""
    from types import SimpleNamespace

    from llmgw.accounting.limits import RateLimiter
    from llmgw.guard.gateway import GuardLayer
    from llmgw.guard.policy import PolicyBook
    from llmgw.guard.scan import Scanner

    gw.accountant = SimpleNamespace(rates=RateLimiter())
    gw.guard = GuardLayer(PolicyBook({}, mode="enforce"), Scanner({})) if guard else None
    reconciler = SimpleNamespace(control=gw.config.control)
    gw.control = SimpleNamespace(plane=SimpleNamespace(config=gw.config, reconciler=reconciler))
    return SimpleNamespace(config=gw.config)


def test_the_cluster_settings_reach_limits_portal_guard_and_reconciler():
    running = parse_server_config({})
    gw = gateway(running)
    portal = with_parts(gw)
    live = GatewayLive(gw, portal=portal)
    assert live.keys == frozenset(LIVE_KEYS)
    new = parse_server_config({"auth": {"signup_open": True, "default_rpm": 60, "default_tpm": 1000},
                               "guard": {"mode": "shadow"}, "control": {"park_after": 9},
                               "admission": {"default_band": "platinum", "bands": [{"name": "platinum"}]}})
    result, taken = live.apply(running, new)
    # The bands are read at start: a default band the running server does not have waits for a restart.
    assert taken == ["auth.signup_open", "auth.default_rpm", "auth.default_tpm", "control.park_after",
                     "guard.mode"]
    assert result.admission.default_band == "silver" and gw.admission.default_band == "silver"
    assert (gw.accountant.rates.default_rpm, gw.accountant.rates.default_tpm) == (60, 1000)
    assert portal.config.auth.signup_open is True and portal.config.auth.session_ttl == running.auth.session_ttl
    assert gw.guard.book.mode == "shadow"
    plane = gw.control.plane
    assert plane.reconciler.control.park_after == 9 and plane.config.control.park_after == 9
    assert plane.reconciler.control.lease_ttl == running.control.lease_ttl


def test_a_server_started_with_the_guard_off_turns_it_on_only_at_a_restart():
    running = parse_server_config({"guard": {"mode": "off"}})
    gw = gateway(running)
    with_parts(gw, guard=False)
    live = GatewayLive(gw)  # and no portal here
    assert "guard.mode" not in live.keys and "auth.signup_open" not in live.keys
    result, taken = live.apply(running, parse_server_config({"guard": {"mode": "enforce"},
                                                              "auth": {"signup_open": True}}))
    assert (result, taken) == (running, [])


def test_nothing_to_take_up_changes_nothing():
    running = parse_server_config({"listen": ":1"})
    gw = gateway(running)
    result, taken = GatewayLive(gw).apply(running, parse_server_config({"listen": ":2"}))
    assert (result, taken) == (running, []) and gw.config is running


async def test_the_running_server_takes_up_a_saved_change_and_one_made_by_hand(tmp_path, monkeypatch):
    import asyncio
    import socket

    import aiohttp

    from llmgw.admin import server_config
    from llmgw.config.load import load_server_config
    from llmgw.server import run_server

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    monkeypatch.setattr(server_config, "WATCH_S", 0.05)
    admin = f"127.0.0.1:{free_port()}"
    path = tmp_path / "server.yaml"
    path.write_text(f"""\
# one machine, for a test
listen: "127.0.0.1:{free_port()}"   # the client API
admin_listen: "{admin}"
admin_token_file: {tmp_path / "admin-token"}
metrics_listen: ""
store:
  dsn: {tmp_path / "llmgw.db"}
control:
  enabled: false   # a gateway only
router:
  retries:
    attempts: 2
""", encoding="utf-8")
    stop = asyncio.Event()
    task = asyncio.create_task(run_server(load_server_config(path), stop=stop, drain_seconds=1,
                                          config_path=str(path)))
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(200):
                if (tmp_path / "admin-token").exists():
                    try:
                        token = (tmp_path / "admin-token").read_text().strip()
                        headers = {"Authorization": f"Bearer {token}"}
                        async with http.get(f"http://{admin}/api/v1/server-config", headers=headers) as resp:
                            if resp.status == 200:
                                break
                    except aiohttp.ClientConnectionError:
                        pass
                await asyncio.sleep(0.02)

            async def value(key: str):
                async with http.get(f"http://{admin}/api/v1/server-config", headers=headers) as resp:
                    return next(k for k in (await resp.json())["keys"] if k["key"] == key)

            assert (await value("router.retries.attempts"))["applies"] == "live"
            body = {"set": {"router.retries.attempts": 4, "listen": "127.0.0.1:1"}}
            async with http.put(f"http://{admin}/api/v1/server-config", headers=headers, json=body) as resp:
                saved = await resp.json()
            assert saved["applied"] == ["router.retries.attempts"] and saved["restart_needed"] == ["listen"]
            assert (await value("router.retries.attempts"))["value"] == 4
            listen = await value("listen")
            assert listen["restart_pending"] is True and listen["value"] != "127.0.0.1:1"
            assert "# one machine, for a test" in path.read_text() and "# a gateway only" in path.read_text()

            path.write_text(path.read_text().replace("attempts: 4", "attempts: 6"), encoding="utf-8")
            for _ in range(100):
                if (await value("router.retries.attempts"))["value"] == 6:
                    break
                await asyncio.sleep(0.05)
            assert (await value("router.retries.attempts"))["value"] == 6
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0
