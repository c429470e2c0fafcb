"""What a new leader does with a change a former leader left running: carry it on from its stage, or end it
safely (the model on the revision it had, nothing running twice), decided from what the store holds now."""

from __future__ import annotations

import pytest

from llmgw.control.rollout import resume_decision
from llmgw.control.rollout_state import Canary, Previous

ARGS = {"model": "chat", "to": "acme/chat@v2", "from": "acme/chat@v1"}
CANARY = Canary(model="chat", name="chat-canary", revision="acme/chat@v2", weight=0.0, for_update=True)
PREVIOUS = Previous(model="chat", spec={"name": "chat"}, revision="acme/chat@v1", until=9e9)


@pytest.mark.parametrize(("kind", "stage"), [("update", "starting"), ("update", "moving"), ("canary", "starting"),
                                             ("promote", "gate"), ("promote", "moving")])
def test_every_stage_of_a_change_whose_canary_is_there_is_carried_on_from_that_stage(kind, stage):
    decision = resume_decision(kind, stage, ARGS, model_source="acme/chat@v1", canary=CANARY, previous=None)
    assert (decision.stage, decision.end) == (stage, "")


@pytest.mark.parametrize(("kind", "stage"), [("update", "starting"), ("canary", "starting"), ("promote", "gate")])
def test_a_change_whose_canary_was_taken_out_ends_with_the_model_on_its_old_revision(kind, stage):
    decision = resume_decision(kind, stage, ARGS, model_source="acme/chat@v1", canary=None, previous=None)
    assert decision.stage == ""
    assert decision.end == "its canary was taken out meanwhile; chat keeps serving acme/chat@v1"
    assert not decision.remove_canary


def test_a_canary_of_another_revision_is_not_the_one_the_change_was_moving_to():
    other = Canary(model="chat", name="chat-canary", revision="acme/chat@v9", weight=10.0)
    decision = resume_decision("update", "starting", ARGS, model_source="acme/chat@v1", canary=other,
                               previous=None)
    assert decision.end.startswith("its canary was taken out meanwhile") and not decision.remove_canary


def test_a_move_whose_definition_was_written_and_canary_removed_still_restarts_the_replicas():
    decision = resume_decision("update", "moving", ARGS, model_source="acme/chat@v2", canary=None,
                               previous=PREVIOUS)
    assert (decision.stage, decision.end) == ("finishing", "")


def test_a_move_that_never_wrote_the_definition_and_lost_its_canary_leaves_the_old_revision():
    decision = resume_decision("update", "moving", ARGS, model_source="acme/chat@v1", canary=None, previous=None)
    assert decision.end == "its canary was taken out meanwhile; chat keeps serving acme/chat@v1"


def test_a_model_gone_from_the_catalog_ends_the_change_and_takes_its_canary_out():
    decision = resume_decision("update", "starting", ARGS, model_source=None, canary=CANARY, previous=None)
    assert decision.end == "chat is no longer in the catalog; nothing is left to change"
    assert decision.remove_canary


def test_a_rollback_is_carried_on_while_its_revision_is_kept_or_already_written():
    back = {"model": "chat", "to": "acme/chat@v1", "from": "acme/chat@v2"}
    kept = resume_decision("rollback", "moving", back, model_source="acme/chat@v2", canary=None, previous=PREVIOUS)
    written = resume_decision("rollback", "moving", back, model_source="acme/chat@v1", canary=None, previous=None)
    assert kept.stage == written.stage == "moving"
    lost = resume_decision("rollback", "moving", back, model_source="acme/chat@v2", canary=None, previous=None)
    assert lost.end == "the revision to return to is no longer kept; chat keeps serving acme/chat@v2"


def test_a_stage_this_version_does_not_know_ends_safely_and_takes_out_the_canary_it_started():
    decision = resume_decision("update", "polishing", ARGS, model_source="acme/chat@v1", canary=CANARY,
                               previous=None)
    assert decision.end == ("its stage 'polishing' is not known to this version; the canary was taken out and "
                            "chat keeps serving acme/chat@v1")
    assert decision.remove_canary
    promote = resume_decision("promote", "polishing", ARGS, model_source="acme/chat@v1", canary=CANARY,
                              previous=None)
    assert not promote.remove_canary  # a promotion's canary was the operator's before it: it stays
