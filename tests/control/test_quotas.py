"""Capacity quotas in placement: limits (nested scopes, any case, GPUs, cores, memory), guarantees that
preempt, the reconciler reading them each pass, and the admin API's quotas reaching placement."""

from __future__ import annotations

import logging
import random

import pytest

from llmgw.admin import make_admin_app
from llmgw.auth.tenancy import Tenancy
from llmgw.config.server import ServerConfig
from llmgw.control.explain import explain
from llmgw.control.placement import Holding, PlacementPass, place
from llmgw.control.quotas import (
    PATHS_TTL,
    QUOTAS_SETTING,
    Amounts,
    CapacityQuota,
    QuotaReader,
    Quotas,
    owner_path,
    under,
)

from . import test_placement_speed as speed
from .conftest import ENGINES, GiB, Harness, gpus, model, register
from .test_jobs import follow
from .test_placement import nodes

NOTHING = Amounts()


def quota(scope: str, *, limit: Amounts = NOTHING, guaranteed: Amounts = NOTHING) -> CapacityQuota:
    return CapacityQuota(scope=scope, path=owner_path(scope), limit=limit, guaranteed=guaranteed)


def gpu_model(name: str, owner: str = "", n: int = 1, **spec):
    return model(name, engine="vllm", owner=owner, profiles=[{"name": "d", "gpus": n}], **spec)


def held(replica_id: str, owner: str, node: str, cards: tuple[int, ...], **fields) -> Holding:
    return Holding(replica_id, replica_id.rsplit("-", 1)[0], node, gpus=cards, owner=owner, **fields)


ML_8 = Quotas([quota("team:acme/ml", limit=Amounts(gpus=8))])


# ---------------------------------------------------------------- owners and scopes


def test_an_owner_names_a_path_in_any_case_and_counts_toward_every_scope_above_it():
    assert owner_path("team:Acme/ML") == owner_path("acme/ml") == owner_path(" project:acme / ml ") == "acme/ml"
    assert owner_path("") == ""
    assert under("acme/ml/train", "acme/ml") and under("acme/ml", "acme/ml") and under("acme/ml", "acme")
    assert not under("acme/mlops", "acme/ml") and not under("acme", "acme/ml") and not under("acme", "")
    quotas = Quotas([quota("team:acme/ml", limit=Amounts(gpus=8)), quota("org:acme", limit=Amounts(gpus=20)),
                     quota("team:acme/web", limit=Amounts(gpus=1))])
    assert [q.scope for q in quotas.of("PROJECT:Acme/ML/train")] == ["org:acme", "team:acme/ml"]
    assert quotas.of("") == () and quotas.of("globex/ml") == ()
    assert not Quotas() and quotas


# ---------------------------------------------------------------- limits


def test_a_replica_that_would_go_over_a_limit_is_not_placed_and_the_quota_is_named():
    ns = nodes(register("a", gpu=gpus(8)), register("b", gpu=gpus(8)))
    holdings = [held(f"old-{i}", "team:acme/ml", "a", (i,)) for i in range(8)]
    decision = place(gpu_model("new", "team:acme/ml"), ns, holdings, engines=ENGINES, quotas=ML_8)
    assert decision.placement is None
    assert decision.summary() == "quota of team:acme/ml: 8 GPUs at most, its models hold 8"
    assert decision.rejections == ()  # no node was weighed: the quota stopped it first

    # Below the limit, but not by enough for the replica.
    decision = place(gpu_model("new", "team:acme/ml", n=2), ns, holdings[:7], engines=ENGINES, quotas=ML_8)
    assert decision.summary() == "quota of team:acme/ml: 8 GPUs at most, its models hold 7 and a replica needs 2"
    # Within it: placed, on node b (node a is full anyway).
    decision = place(gpu_model("new", "team:acme/ml"), ns, holdings[:7], engines=ENGINES, quotas=ML_8)
    assert decision.placement is not None


def test_models_of_a_project_count_toward_its_team_and_organization():
    ns = nodes(register("a", gpu=gpus(8)))
    quotas = Quotas([quota("team:acme/ml", limit=Amounts(gpus=3)), quota("org:acme", limit=Amounts(gpus=100))])
    holdings = [held("train-1", "project:acme/ml/train", "a", (0, 1)),
                held("eval-1", "acme/ml/eval", "a", (2,)),
                held("web-1", "team:acme/web", "a", (3,))]  # another team: not counted
    decision = place(gpu_model("serve", "project:acme/ml/serve"), ns, holdings, engines=ENGINES, quotas=quotas)
    assert decision.summary() == "quota of team:acme/ml: 3 GPUs at most, its models hold 3"
    # The organization's quota counts the other team too: the widest is named first.
    quotas = Quotas([quota("team:acme/ml", limit=Amounts(gpus=3)), quota("org:acme", limit=Amounts(gpus=4))])
    decision = place(gpu_model("web", "team:acme/web"), ns, holdings, engines=ENGINES, quotas=quotas)
    assert decision.summary() == "quota of org:acme: 4 GPUs at most, its models hold 4"


def test_owners_are_matched_whatever_their_case():
    ns = nodes(register("a", gpu=gpus(4)))
    quotas = Quotas([quota("team:Acme/ML", limit=Amounts(gpus=2))])
    holdings = [held("x-1", "TEAM:acme/Ml", "a", (0,)), held("y-1", "Acme/ML/Train", "a", (1,))]
    decision = place(gpu_model("z", "team:ACME/ml"), ns, holdings, engines=ENGINES, quotas=quotas)
    assert decision.summary() == "quota of team:Acme/ML: 2 GPUs at most, its models hold 2"


def test_memory_and_cores_limits():
    ns = nodes(register("a", cores=64, memory=512 * GiB))
    cpu = model("cpu", owner="team:acme/ml", profiles=[{"name": "d", "cores": 8, "memory": "64GiB"}])
    holdings = [Holding("r-1", "other", "a", cores=12, memory=200 * GiB, owner="team:acme/ml")]
    cores = Quotas([quota("team:acme/ml", limit=Amounts(cores=16))])
    assert place(cpu, ns, holdings, engines=ENGINES, quotas=cores).summary() == (
        "quota of team:acme/ml: 16 cores at most, its models hold 12 and a replica needs 8")
    memory = Quotas([quota("team:acme/ml", limit=Amounts(memory=256 * GiB))])
    assert place(cpu, ns, holdings, engines=ENGINES, quotas=memory).summary() == (
        "quota of team:acme/ml: 256 GiB of memory at most, its models hold 200 GiB and a replica needs 64 GiB")
    # A GPU limit does not stop a replica that needs no GPU, even with the scope over it.
    over = Quotas([quota("team:acme/ml", limit=Amounts(gpus=0))])
    assert place(cpu, ns, holdings, engines=ENGINES, quotas=over).placement is not None


def test_replicas_being_stopped_do_not_count_and_a_model_without_an_owner_is_free():
    ns = nodes(register("a", gpu=gpus(8)))
    holdings = [held(f"old-{i}", "team:acme/ml", "a", (i,), leaving=i < 2) for i in range(7)]
    assert place(gpu_model("new", "team:acme/ml"), ns, holdings, engines=ENGINES, quotas=ML_8).placed
    full = [held(f"old-{i}", "team:acme/ml", "a", (i,)) for i in range(8)]
    ns = nodes(register("a", gpu=gpus(16)))
    assert place(gpu_model("free"), ns, full, engines=ENGINES, quotas=ML_8).placed
    assert place(gpu_model("elsewhere", "team:acme/web"), ns, full, engines=ENGINES, quotas=ML_8).placed


def test_a_profile_over_the_limit_is_passed_over_for_the_next():
    ns = nodes(register("a", gpu=gpus(8), cores=64))
    m = model("two", owner="team:acme/ml", profiles=[
        {"name": "gpu", "engine": "vllm", "gpus": 4}, {"name": "cpu", "engine": "llamacpp", "cores": 16}])
    holdings = [held(f"old-{i}", "team:acme/ml", "a", (i,)) for i in range(6)]
    decision = place(m, ns, holdings, engines=ENGINES, quotas=ML_8)
    assert decision.placement.profile.name == "cpu"
    assert decision.quota == "gpu: quota of team:acme/ml: 8 GPUs at most, its models hold 6 and a replica needs 4"
    # With nowhere for the other profile either, the summary says both.
    ns = nodes(register("a", gpu=gpus(8), cores=8))
    decision = place(m, ns, holdings, engines=ENGINES, quotas=ML_8)
    assert decision.summary() == ("no node can run it: a (cpu): needs 16 cores, has 8 in all; gpu: quota of "
                                  "team:acme/ml: 8 GPUs at most, its models hold 6 and a replica needs 4")


def test_a_pass_counts_what_it_holds_between_decisions():
    ns = nodes(register("a", gpu=gpus(8)))
    one = Quotas([quota("team:acme/ml", limit=Amounts(gpus=1))])
    p = PlacementPass(ns, [], engines=ENGINES)
    first = p.decide(gpu_model("m", "team:acme/ml"), quotas=one)
    assert first.placed
    p.hold(Holding("m-1", "m", "a", gpus=first.placement.gpus, owner="team:acme/ml"))
    assert p.decide(gpu_model("m", "team:acme/ml"), quotas=one).summary() == (
        "quota of team:acme/ml: 1 GPU at most, its models hold 1")
    # place() reusing its pass with new, equal holdings counts the owners again.
    holdings = [Holding("m-1", "m", "a", gpus=(0,), owner="team:acme/ml")]
    assert not place(gpu_model("m", "team:acme/ml"), ns, holdings, engines=ENGINES, quotas=one).placed
    holdings = [Holding("m-1", "m", "a", gpus=(0,), owner="team:acme/ml", leaving=True)]
    assert place(gpu_model("m", "team:acme/ml"), ns, holdings, engines=ENGINES, quotas=one).placed


@pytest.mark.parametrize("seed", range(40))
def test_quotas_that_apply_to_no_model_change_no_decision(seed):
    """The randomized clusters of the equivalence test, with quotas nobody's models fall under."""
    rng = random.Random(seed)
    ns = [speed.random_node(rng, i) for i in range(rng.randint(1, 9))]
    models = speed.random_models(rng)
    holdings = [speed.random_holding(rng, i, ns, models) for i in range(rng.randint(0, 6))]
    quotas = Quotas([quota("team:acme/ml", limit=Amounts(gpus=0, cores=0, memory=0),
                           guaranteed=Amounts(gpus=0))])
    for _ in range(10):
        m = rng.choice(models)
        expected = speed.reference_place(m, ns, holdings, engines=ENGINES)
        speed.same(place(m, ns, holdings, engines=ENGINES, quotas=quotas), expected)
        speed.same(place(m, ns, holdings, engines=ENGINES, quotas=Quotas()), expected)


# ---------------------------------------------------------------- guarantees


GUARANTEED = Quotas([quota("team:acme/ml", limit=Amounts(gpus=8), guaranteed=Amounts(gpus=2)),
                     quota("team:acme/web", guaranteed=Amounts(gpus=1))])


def test_a_scope_within_its_guarantee_stops_opportunistic_replicas_of_scopes_over_theirs():
    ns = nodes(register("a", gpu=gpus(2)), register("b", gpu=gpus(2)))
    holdings = [
        held("web-1", "team:acme/web", "a", (0,), model_class="opportunistic"),  # web's guarantee: kept
        held("web-2", "team:acme/web", "a", (1,), model_class="opportunistic", started=2),
        held("batch-1", "", "b", (0,), model_class="standard"),
        held("crit-1", "", "b", (1,), model_class="critical"),
    ]
    decision = place(gpu_model("train", "project:acme/ml/train"), ns, holdings, engines=ENGINES,
                     quotas=GUARANTEED)
    assert decision.placement.node == "a" and decision.placement.preempts == ("web-2",)
    assert decision.placement.why == "within the guarantee of team:acme/ml: stops web-2 (opportunistic)"
    assert decision.placement.guarantee == "team:acme/ml"

    # With web at its guarantee, a standard replica of a model with no guarantee goes instead.
    holdings[1] = held("vip-1", "", "a", (1,), model_class="critical")
    decision = place(gpu_model("train", "team:acme/ml"), ns, holdings, engines=ENGINES, quotas=GUARANTEED)
    assert (decision.placement.node, decision.placement.preempts) == ("b", ("batch-1",))

    # Never a critical one, and never what another scope is guaranteed.
    holdings[2] = held("batch-1", "", "b", (0,), model_class="critical")
    decision = place(gpu_model("train", "team:acme/ml"), ns, holdings, engines=ENGINES, quotas=GUARANTEED)
    assert decision.placement is None


def test_no_preemption_beyond_the_guarantee_or_without_one():
    ns = nodes(register("a", gpu=gpus(3)))
    holdings = [held("ml-1", "team:acme/ml", "a", (0,)),
                held("ml-2", "team:acme/ml", "a", (1,), model_class="opportunistic"),
                held("other-1", "", "a", (2,), model_class="opportunistic")]
    # acme/ml holds the 2 GPUs it is guaranteed: a third would be beyond its guarantee.
    assert place(gpu_model("train", "team:acme/ml"), ns, holdings, engines=ENGINES, quotas=GUARANTEED).placement \
        is None
    # acme/web holds none of its 1: it stops the replica with no guarantee, not one acme/ml is guaranteed.
    decision = place(gpu_model("w", "team:acme/web"), ns, holdings, engines=ENGINES, quotas=GUARANTEED)
    assert decision.placement.preempts == ("other-1",)
    # A scope with no guarantee preempts nothing; nor does anything when no quotas are given.
    assert place(gpu_model("x", "team:acme/x"), ns, holdings, engines=ENGINES, quotas=GUARANTEED).placement is None
    assert place(gpu_model("w", "team:acme/web"), ns, holdings, engines=ENGINES).placement is None


# ---------------------------------------------------------------- the reconciler


async def put_quotas(store, entries: dict) -> None:
    await store.set_setting(QUOTAS_SETTING, entries, actor="test")


async def tree(store) -> dict[str, str]:
    t = Tenancy(store, actor="test")
    return {path: (await t.create(path)).id for path in ("acme", "acme/ml", "acme/ml/train")}


async def test_the_reconciler_holds_models_to_their_limits_and_places_them_once_raised(sqlite_store, caplog):
    caplog.set_level(logging.INFO, logger="llmgw")
    ids = await tree(sqlite_store)
    await put_quotas(sqlite_store, {ids["acme/ml"]: {"kind": "team", "limit": {"gpus": 2}}})
    h = Harness([gpu_model("train", "project:Acme/ML/train", scaling={"min": 3, "max": 3})], store=sqlite_store)
    jobs = follow(h)
    h.connect(register("gpu-1", gpu=gpus(4)))
    assert len(await h.start_ready()) == 2
    await h.tick(5)
    await h.tick(5)
    info = explain(h.rec, "train")
    sentence = "quota of team:acme/ml: 2 GPUs at most, its models hold 2"
    assert (info["status"], info["reason"]) == ("unplaced", sentence)
    assert info["last_placement"]["summary"] == sentence and info["next_placement"]["summary"] == sentence
    [job] = jobs.select()
    assert job.now == f"waiting for room: {sentence}"
    logged = [r for r in caplog.records if r.getMessage() == "model not placed"]
    assert len(logged) == 1 and logged[0].fields == {"model": "train", "why": sentence}

    await put_quotas(sqlite_store, {ids["acme/ml"]: {"kind": "team", "limit": {"gpus": 3}}})
    [(_, start)] = await h.start_ready()
    assert start.model == "train" and len(h.replicas.replicas_for("train")) == 3


async def test_a_drain_replacement_is_not_held_to_the_quota(sqlite_store):
    ids = await tree(sqlite_store)
    await put_quotas(sqlite_store, {ids["acme/ml"]: {"kind": "team", "limit": {"gpus": 1}}})
    h = Harness([gpu_model("train", "team:acme/ml")], store=sqlite_store)
    h.connect(register("gpu-1", gpu=gpus(1)))
    h.connect(register("gpu-2", gpu=gpus(1)))
    [(old_node, old)] = await h.start_ready()
    h.rec.drain(old_node)
    [(new_node, new)] = await h.start_ready()
    assert new_node != old_node and new.shard_id != old.shard_id


async def test_a_guarantee_preempts_through_the_reconciler_and_the_room_goes_to_it(sqlite_store):
    ids = await tree(sqlite_store)
    await put_quotas(sqlite_store, {ids["acme/ml"]: {"kind": "team", "guaranteed": {"gpus": 1}}})
    h = Harness([gpu_model("batch", **{"class": "opportunistic"}, scaling={"min": 1, "max": 1}),
                 gpu_model("aaa", scaling={"min": 0, "max": 1}),
                 gpu_model("train", "team:acme/ml", **{"class": "opportunistic"}, scaling={"min": 0, "max": 1})],
                store=sqlite_store)
    h.connect(register("gpu-1", gpu=gpus(1)))
    [(_, batch)] = await h.start_ready()
    await h.catalog.scale("aaa", min=1, actor="test")
    await h.catalog.scale("train", min=1, actor="test")
    await h.tick()
    assert h.agents.starts() == []
    assert [m.shard_id for _, m in h.agents.stops()] == [batch.shard_id]
    assert h.rec.records[batch.shard_id].retiring == "preempted for train, within the guarantee of team:acme/ml"
    h.status("gpu-1", batch.shard_id, "stopped")
    # The standard model (first by class and name) does not take the room: it was made for train.
    [(_, start)] = await h.start_ready()
    assert start.model == "train"
    await h.tick(5)
    assert h.agents.starts() == [] and h.agents.stops() == []
    assert explain(h.rec, "aaa")["reason"] == "no node can run it: gpu-1: needs 1 free GPU, has 0"


async def test_the_reader_follows_a_rename_and_drops_a_scope_that_is_gone(sqlite_store):
    ids = await tree(sqlite_store)
    now = [0.0]
    reader = QuotaReader(clock=lambda: now[0])
    assert not await reader.read(sqlite_store)
    await put_quotas(sqlite_store, {ids["acme/ml"]: {"kind": "team", "limit": {"gpus": 2, "memory": "1GiB"}},
                                    ids["acme/ml/train"]: {"kind": "project", "guaranteed": {"cores": 4}},
                                    "team-gone": {"kind": "team", "limit": {"gpus": 1}}})
    quotas = await reader.read(sqlite_store)
    assert [(q.scope, q.path, q.limit, q.guaranteed) for q in quotas.quotas] == [
        ("team:acme/ml", "acme/ml", Amounts(gpus=2, memory=GiB), Amounts()),
        ("project:acme/ml/train", "acme/ml/train", Amounts(), Amounts(cores=4)),
    ]
    await sqlite_store.rename_team(ids["acme/ml"], "research")
    assert await reader.read(sqlite_store) == quotas  # the paths are kept a while
    now[0] += PATHS_TTL + 1
    assert [q.scope for q in (await reader.read(sqlite_store)).quotas] == [
        "team:acme/research", "project:acme/research/train"]


# ---------------------------------------------------------------- through the admin API


TOKEN = "s3cret-admin-token-for-tests"
JSON = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


async def test_a_quota_set_through_the_admin_api_holds_the_next_pass(sqlite_store, aiohttp_client):
    client = await aiohttp_client(make_admin_app(ServerConfig(), sqlite_store, cluster=None, token=TOKEN))

    async def call(method: str, path: str, body: dict | None = None) -> dict:
        resp = await client.request(method, "/api/v1" + path, headers=JSON, json=body)
        assert resp.status in (200, 201), await resp.text()
        return await resp.json()

    for path in ("acme", "acme/ml", "acme/ml/train"):
        await call("POST", "/orgs", {"path": path})
    await call("PUT", "/quotas", {"scope": "team:acme/ml", "limit": {"gpus": 1}})
    h = Harness([gpu_model("train", "project:acme/ml/train", scaling={"min": 2, "max": 2})], store=sqlite_store)
    h.connect(register("gpu-1", gpu=gpus(2)))
    assert len(await h.start_ready()) == 1
    assert h.rec.dry_run(h.catalog.get("train")).summary() == "quota of team:acme/ml: 1 GPU at most, its models hold 1"

    await call("PUT", "/quotas", {"scope": "team:acme/ml", "limit": {"gpus": 2}})
    assert len(await h.start_ready()) == 1
    await call("PUT", "/quotas", {"scope": "org:acme", "limit": {"gpus": 1}})
    await h.tick()
    assert h.agents.stops() == []  # a lower limit stops nothing that runs; it holds back new replicas
    assert h.rec.dry_run(h.catalog.get("train")).summary() == "quota of org:acme: 1 GPU at most, its models hold 2"
