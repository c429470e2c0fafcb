"""Routing profiles a key is given: latency-first, cost-first, pinned:POOL and server.yaml's router.profiles."""

from __future__ import annotations

import asyncio
import contextlib

import attrs
import pytest

from llmgw.config import ConfigError, parse_server_config
from llmgw.router.replicas import Replica

from .conftest import HELLO, model, principal

SLOW = {"tpot": 0.05}  # a held stream of 40 tokens lasts two seconds: long enough to keep its replica busy


def keys(**profiles: str | None) -> dict:
    return {name: attrs.evolve(principal(name), routing=routing) for name, routing in profiles.items()}


async def ask(http, gw, key: str, session: str | None = None, text: str | None = None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {key}", **({"x-session-id": session} if session else {})}
    messages = [{"role": "user", "content": text}] if text else HELLO
    body = {"model": "m", "messages": messages, "max_tokens": 1}
    async with http.post(gw.base_url + "/chat/completions", json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def served_by(http, gw, key: str, session: str | None = None, text: str | None = None) -> str:
    before = len(gw.accountant.rows)
    status, body = await ask(http, gw, key, session, text)
    assert status == 200, body
    rows = await gw.settle(before + 1)
    return rows[before].replica


@contextlib.asynccontextmanager
async def held(http, gw, key: str, session: str | None = None):
    """A stream kept open (its first event read) while the block runs: its replica has one request more."""
    headers = {"Authorization": f"Bearer {key}", **({"x-session-id": session} if session else {})}
    body = {"model": "m", "messages": HELLO, "max_tokens": 40, "stream": True}
    async with http.post(gw.base_url + "/chat/completions", json=body, headers=headers) as resp:
        assert resp.status == 200
        await resp.content.readline()
        yield


def cluster_replica(engine, rid: str, **labels: str) -> Replica:
    """A replica as the control plane publishes it: one of the cluster's own, with its node's labels."""
    return Replica(id=rid, model="m", base_url=engine.url + "/v1", source="control", labels=labels,
                   max_concurrency=8)


async def test_latency_first_takes_the_least_busy_replica_where_the_default_keeps_a_session_on_its_own(
        sim, gateway, http):
    a, b = await sim(models=["m"], **SLOW), await sim(models=["m"], **SLOW)
    gw = await gateway([model("m", a, b, concurrency=8)], keys=keys(plain=None, fast="latency-first"))
    first = await served_by(http, gw, "plain", "s1")
    async with held(http, gw, "plain", "s1"):  # the session's replica now has a request in flight
        assert await served_by(http, gw, "plain", "s1") == first  # default: the session's replica still
        other = await served_by(http, gw, "fast", "s1")
        assert other != first  # latency-first: the idle one


async def test_cost_first_keeps_to_the_clusters_own_engine_though_a_provider_is_idler(sim, gateway, http):
    provider, own = await sim(models=["m"], **SLOW), await sim(models=["m"], **SLOW)
    gw = await gateway([model("m", provider, concurrency=8)], keys=keys(plain=None, cheap="cost-first"))
    gw.gateway.replicas.add(cluster_replica(own, "cluster-1"))
    assert await served_by(http, gw, "cheap") == "cluster-1"
    async with held(http, gw, "cheap"):  # the cluster's engine is the busier one now
        # another prompt (no prefix cached anywhere): the default takes the idle provider, cost-first does not
        assert await served_by(http, gw, "plain", text="Name a lake.") == "m/endpoint-0"
        assert await served_by(http, gw, "cheap", text="Name a sea.") == "cluster-1"


async def test_pinned_pool_is_served_only_on_its_nodes_and_refused_when_none_runs_there(sim, gateway, http):
    engine = await sim(models=["m"])
    gw = await gateway([model("m", engine, concurrency=8)],
                       keys=keys(eu="pinned:eu", asia="pinned:asia", plain=None))
    gw.gateway.replicas.add(cluster_replica(engine, "eu-1", pool="eu"))
    gw.gateway.replicas.add(cluster_replica(engine, "us-1", pool="us"))
    assert {await served_by(http, gw, "eu", text=f"Question {i}.") for i in range(4)} == {"eu-1"}
    # a key without a profile, prompts no replica has cached: spread over all three
    assert len({await served_by(http, gw, "plain", text=f"Question {i}.") for i in range(6)}) == 3
    status, body = await ask(http, gw, "asia")
    assert status == 503 and body["error"]["code"] == "no_replica_in_profile"
    assert "pool=asia" in body["error"]["message"] and "'pinned:asia'" in body["error"]["message"]


async def test_a_profile_of_server_yaml_is_used_by_name_and_an_unknown_one_is_refused(sim, gateway, http):
    provider, own = await sim(models=["m"]), await sim(models=["m"])
    profiles = [{"name": "eu-cheap", "prefer": "cost", "labels": {"pool": "eu", "tier": "spot"}}]
    gw = await gateway([model("m", provider, concurrency=8)], router={"profiles": profiles},
                       keys=keys(mine="eu-cheap", lost="was-removed"))
    gw.gateway.replicas.add(cluster_replica(own, "eu-spot", pool="eu", tier="spot"))
    gw.gateway.replicas.add(cluster_replica(own, "eu-reserved", pool="eu", tier="reserved"))
    assert {await served_by(http, gw, "mine", text=f"Question {i}.") for i in range(3)} == {"eu-spot"}
    status, body = await ask(http, gw, "lost")
    assert status == 503 and body["error"]["code"] == "routing_profile_unknown"
    assert "'was-removed'" in body["error"]["message"] and "router.profiles" in body["error"]["message"]


@pytest.mark.parametrize(("profiles", "where", "says"), [
    ([{"name": "latency-first"}], "router.profiles[0].name", "built-in"),
    ([{"name": "pinned:eu"}], "router.profiles[0].name", "built-in"),
    ([{"name": "EU"}], "router.profiles[0].name", "lower-case"),
    ([{"name": "eu"}, {"name": "eu"}], "router.profiles[1].name", "profiles[0]'s name too"),
    ([{"name": "eu", "prefer": "fastest"}], "prefer", "fastest"),
])
def test_router_profiles_that_cannot_be_used_are_refused_naming_the_field(profiles, where, says):
    with pytest.raises(ConfigError) as caught:
        parse_server_config({"router": {"profiles": profiles}})
    assert where in str(caught.value) and says in str(caught.value)


async def test_a_key_without_a_profile_is_routed_as_before(sim, gateway, http):
    a, b = await sim(models=["m"]), await sim(models=["m"])
    gw = await gateway([model("m", a, b)], keys=keys(plain=None, named="default"))
    served = [await served_by(http, gw, key, "s9") for key in ("plain", "named", "plain")]
    assert len(set(served)) == 1  # session affinity, as without profiles


async def test_a_pinned_key_whose_pool_runs_no_replica_of_the_model_is_served_by_a_fallback_that_has_one(
        sim, gateway, http):
    engine = await sim(models=["m", "small"])
    gw = await gateway([model("m", engine, fallbacks=["small"]), model("small", engine)],
                       keys=keys(eu="pinned:eu"))
    gw.gateway.replicas.add(attrs.evolve(cluster_replica(engine, "small-eu", pool="eu"), model="small"))
    before = len(gw.accountant.rows)
    status, body = await ask(http, gw, "eu")
    assert status == 200 and body["model"] == "small"
    assert (await gw.settle(before + 1))[before].replica == "small-eu"


async def test_a_pinned_request_waiting_for_its_pool_does_not_hold_up_others_when_room_frees_elsewhere():
    from llmgw.config.server import AdmissionConfig, AffinityConfig, Band
    from llmgw.config.units import Duration
    from llmgw.router.admission import Admission
    from llmgw.router.choose import Chooser, Want
    from llmgw.router.replicas import ReplicaSet
    from llmgw.router.routing_profiles import RoutingProfiles

    eu = Replica(id="eu-1", model="m", base_url="http://eu/v1", source="control", labels={"pool": "eu"},
                 max_concurrency=1)
    provider = Replica(id="p-1", model="m", base_url="http://p/v1", max_concurrency=1)
    config = AdmissionConfig(queue_depth=10, max_wait=Duration.from_seconds(5), bands=[Band("silver", 1)],
                             default_band="silver")
    adm = Admission(config, ReplicaSet([eu, provider]), Chooser(AffinityConfig()))
    held = [await adm.acquire("m", "silver", Want()), await adm.acquire("m", "silver", Want())]
    pinned = asyncio.create_task(adm.acquire("m", "silver", Want(routing=RoutingProfiles().get("pinned:eu"))))
    await asyncio.sleep(0)
    plain = asyncio.create_task(adm.acquire("m", "silver", Want()))
    await asyncio.sleep(0)
    adm.release(next(g for g in held if g.replica is provider))  # room on the provider: the pinned one may not
    grant = await asyncio.wait_for(plain, 1)
    assert grant.replica is provider and not pinned.done()
    adm.release(next(g for g in held if g.replica is eu))
    assert (await asyncio.wait_for(pinned, 1)).replica is eu


async def test_latency_first_breaks_a_tie_in_load_by_the_replica_holding_the_prompts_prefix(sim, gateway, http):
    a, b = await sim(models=["m"]), await sim(models=["m"])
    gw = await gateway([model("m", a, b)], keys=keys(plain=None, fast="latency-first"))
    long_prompt = "You answer questions about rivers. " * 30  # several prefix blocks
    other = await served_by(http, gw, "plain", text="Name a lake.")
    warm = await served_by(http, gw, "plain", text=long_prompt)  # the other replica: chosen least recently
    assert warm != other
    # both idle now; the least recently chosen is `other`, yet the warm cache wins the tie
    assert [await served_by(http, gw, "fast", text=long_prompt + f" Question {i}?") for i in range(2)] == [warm] * 2
