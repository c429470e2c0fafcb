"""Request ids: unique, in the order they were made (so usage rows append to their index), apart after fork."""

from __future__ import annotations

import os

from llmgw.router.pipeline import _RequestIds, new_request_id


def test_ids_are_unique_and_shaped_as_before():
    ids = [new_request_id() for _ in range(5000)]  # several reads of random bytes
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("req_") and len(i) == 28 and int(i[4:], 16) >= 0 for i in ids)


def test_ids_sort_in_the_order_they_were_made_across_milliseconds():
    ms = [0]
    ids = _RequestIds(clock=lambda: 1_780_000_000 + (ms[0] + 0.5) / 1000)
    made = []
    for _ in range(50):
        made.append(ids())
        ms[0] += 1
    assert sorted(made) == made


def test_a_forked_child_does_not_repeat_its_parents_ids():
    new_request_id()  # the parent has random bytes in hand
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, " ".join(new_request_id() for _ in range(20)).encode())
        os._exit(0)
    os.close(write)
    child = set(os.read(read, 65536).decode().split())
    os.close(read)
    os.waitpid(pid, 0)
    parent = {new_request_id() for _ in range(20)}
    assert len(child) == 20
    assert not {i[-12:] for i in child} & {i[-12:] for i in parent}  # the random halves: bytes of its own
