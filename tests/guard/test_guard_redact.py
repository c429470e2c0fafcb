"""Redaction: consistent numbered placeholders, overlaps, and a request-wide numbering."""

from llmgw.guard.redact import Numbering, redact
from llmgw.plugins.types import Finding


def test_redaction_with_the_detectors(pii, secrets):
    text = ("Mail jane@example.com or JANE@example.com, then bob@example.org. "
            "Card 4111 1111 1111 1111 = 4111111111111111. Key AKIAIOSFODNN7EXAMPLE.")
    findings = pii.find(text) + secrets.find(text)
    out = redact(text, findings, Numbering())
    assert out == ("Mail [EMAIL_1] or [EMAIL_1], then [EMAIL_2]. "
                   "Card [CARD_1] = [CARD_1]. Key [AWS_ACCESS_KEY_1].")


def test_numbering_is_kept_across_messages_of_a_request(pii):
    numbering = Numbering()
    first = "write to a@example.com"
    second = "and b@example.com, not a@example.com"
    assert redact(first, pii.find(first), numbering) == "write to [EMAIL_1]"
    assert redact(second, pii.find(second), numbering) == "and [EMAIL_2], not [EMAIL_1]"
    assert len(numbering) == 2


def test_each_kind_counts_on_its_own():
    n = Numbering()
    assert n.placeholder("email", "a@x.io") == "[EMAIL_1]"
    assert n.placeholder("phone", "+90 532 123 45 67") == "[PHONE_1]"
    assert n.placeholder("phone", "+905321234567") == "[PHONE_1]"  # the same number, written differently
    assert n.placeholder("email", "b@x.io") == "[EMAIL_2]"


def test_overlapping_findings_are_replaced_once_by_the_widest():
    text = "token abc.def.ghi end"
    findings = [Finding("jwt", 6, 17, "secret"), Finding("email", 10, 13)]
    assert redact(text, findings) == "token [JWT_1] end"


def test_no_findings_leaves_the_text():
    assert redact("nothing here", []) == "nothing here"


def test_a_finding_inside_an_encoding_replaces_the_whole_run(pii):
    import base64
    blob = base64.b64encode(b"mail jane@example.com").decode()
    text = f"see {blob}"
    assert redact(text, pii.find(text)) == "see [EMAIL_1]"


def test_placeholders_already_in_a_conversation_are_not_handed_out_again():
    from llmgw.guard.redact import Numbering

    numbering = Numbering()
    numbering.reserve("earlier: my card is [CARD_1], mail [EMAIL_3]; not one: [card_9] [CARD_]")
    assert numbering.placeholder("card", "5555 5555 5555 4444") == "[CARD_2]"
    assert numbering.placeholder("email", "a@example.com") == "[EMAIL_4]"
    assert numbering.placeholder("phone", "+90 532 123 45 67") == "[PHONE_1]"
