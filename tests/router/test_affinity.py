"""Choosing a replica: least outstanding, session affinity, prefix affinity."""

from __future__ import annotations

from llmgw.config.server import AffinityConfig
from llmgw.config.units import Duration
from llmgw.router.choose import (
    BLOCK_CHARS,
    MAX_BLOCKS,
    PREFIX_MARGIN,
    Chooser,
    Want,
    prefix_hashes,
    prompt_text,
)
from llmgw.router.replicas import Replica

from .conftest import model

SYSTEM = "You are a careful assistant for the river authority. " * 30  # ~1.6 KB of shared start


def replicas(n: int = 3) -> list[Replica]:
    return [Replica(id=f"r{i}", model="m", base_url=f"http://r{i}/v1") for i in range(n)]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def test_prompt_text_reads_chat_and_completion_prompts():
    chat = {"messages": [{"role": "system", "content": "Be brief."},
                         {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                                      {"type": "image_url", "image_url": {"url": "x"}}]}]}
    assert prompt_text(chat) == "system\x1fBe brief.\x1euser\x1fHi\x1e"
    assert prompt_text({"prompt": "Once"}) == "Once"
    assert prompt_text({"prompt": ["Once", "Twice"]}) == "Once"
    assert prompt_text({"input": "x"}) == ""


def test_prefix_hashes_share_the_start_of_two_prompts():
    a = prefix_hashes("m", SYSTEM + "question one")
    b = prefix_hashes("m", SYSTEM + "another question entirely")
    assert len(a) == len(SYSTEM) // BLOCK_CHARS
    assert a[:len(SYSTEM) // BLOCK_CHARS] == b[:len(SYSTEM) // BLOCK_CHARS]
    assert prefix_hashes("other", SYSTEM)[0] != a[0], "models share no prefixes"
    assert len(prefix_hashes("m", "x" * BLOCK_CHARS * (MAX_BLOCKS + 10))) == MAX_BLOCKS
    assert len(prefix_hashes("m", "short")) == 1
    assert prefix_hashes("m", "") == ()


def test_least_outstanding_counts_the_engines_queue_and_spreads_ties():
    clock = Clock()
    chooser = Chooser(AffinityConfig(), clock=clock)
    rs = replicas(3)
    rs[0].in_flight = 2
    rs[1].load.waiting, rs[1].load.at = 5, clock()
    picks = [chooser.choose("m", rs, Want()).id for _ in range(2)]
    assert picks[0] == "r2"
    rs[2].in_flight = 3
    assert chooser.choose("m", rs, Want()).id == "r0"
    # A scrape too old is not believed.
    rs[1].load.at = clock() - 60
    assert chooser.choose("m", rs, Want()).id == "r1"


def test_ties_go_round_the_replicas():
    chooser = Chooser(AffinityConfig(), clock=Clock())
    rs = replicas(3)
    assert {chooser.choose("m", rs, Want()).id for _ in range(3)} == {"r0", "r1", "r2"}


def test_a_session_sticks_while_its_replica_has_room_and_expires_after_its_ttl():
    clock = Clock()
    chooser = Chooser(AffinityConfig(session_ttl=Duration.from_seconds(10)), clock=clock)
    rs = replicas(3)
    first = chooser.choose("m", rs, Want(session="s1"))
    first.in_flight = 5  # busier than the others, but the session stays
    assert all(chooser.choose("m", rs, Want(session="s1")) is first for _ in range(3))
    assert chooser.choose("m", [r for r in rs if r is not first], Want(session="s1")) is not first
    clock.now += 60
    assert chooser.choose("m", rs, Want(session="s2")) is not first


def test_a_prefix_goes_back_to_its_replica_unless_that_one_is_much_busier():
    chooser = Chooser(AffinityConfig(), clock=Clock())
    rs = replicas(3)
    hashes = prefix_hashes("m", SYSTEM + "first")
    home = chooser.choose("m", rs, Want(prefix=hashes))
    later = prefix_hashes("m", SYSTEM + "second question")
    home.in_flight = int(PREFIX_MARGIN)  # busier, within the margin
    assert chooser.choose("m", rs, Want(prefix=later)) is home
    home.in_flight = int(PREFIX_MARGIN) + 1
    assert chooser.choose("m", rs, Want(prefix=later)) is not home
    assert chooser.reasons["prefix"] == 1


def test_affinity_can_be_turned_off():
    chooser = Chooser(AffinityConfig(session=False, prefix=False), clock=Clock())
    rs = replicas(2)
    picks = {chooser.choose("m", rs, Want(session="s", prefix=prefix_hashes("m", SYSTEM))).id for _ in range(4)}
    assert picks == {"r0", "r1"}


def test_a_retry_avoids_the_replicas_it_tried():
    chooser = Chooser(AffinityConfig(), clock=Clock())
    rs = replicas(2)
    assert chooser.choose("m", rs, Want(exclude=frozenset({"r0"}))).id == "r1"
    assert chooser.choose("m", rs, Want(exclude=frozenset({"r0", "r1"}))) is None


# ---------------------------------------------------------------- through the gateway


async def test_sessions_and_prefixes_stick_through_the_gateway(sim, gateway):
    engines = [await sim(models=["m"]) for _ in range(3)]
    gw = await gateway([model("m", *engines)])
    client = gw.client()
    for turn in range(4):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"turn {turn}"}],
                                             max_tokens=1, extra_headers={"x-session-id": "chat-7f3a"})
    for turn in range(4):  # no header: the body's user is the session
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q {turn}"}],
                                             max_tokens=1, user="person-9")
    for turn in range(4):
        await client.chat.completions.create(
            model="m", max_tokens=1,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"question {turn}"}])
    for turn in range(3):  # unrelated and sessionless: spread
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"x{turn}"}],
                                             max_tokens=1)
    rows = await gw.settle(15)
    assert len({r.replica for r in rows[0:4]}) == 1
    assert len({r.replica for r in rows[4:8]}) == 1
    assert len({r.replica for r in rows[8:12]}) == 1
    assert len({r.replica for r in rows[12:15]}) == 3
