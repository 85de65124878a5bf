"""A run's answer from what its program returned (actions.answer_of):
content parts or a JSON result, secrets cut from the text either holds."""

from __future__ import annotations

from staal import EmbeddedResource, Image
from staal.records.content import ContentPart
from staal.records.outcomes import Failure
from staal.worker.runs.actions import answer_of

SECRET = "sk_live_51SECRETvalue"


def test_content_parts_are_answered_with_every_secret_cut_from_their_text_and_uris():
    returned = [f"key {SECRET}", Image(b"\x89PNG", "image/png"),
                EmbeddedResource(f"https://x.example/?k={SECRET}", text=f"is {SECRET}")]
    result, content = answer_of(returned, (SECRET,))
    assert result is None and content is not None
    assert all(SECRET not in (part.text or "") + (part.uri or "") for part in content)
    assert content[1] == ContentPart("image", data="iVBORw==", mime_type="image/png")


def test_a_json_result_is_answered_as_before_with_no_content():
    assert answer_of({"a": [1, "b"]}, ()) == ({"a": [1, "b"]}, None)


def test_a_part_that_cannot_be_answered_is_a_value_failure_naming_it():
    failure = answer_of([Image(b"x", "image")], ())
    assert isinstance(failure, Failure) and failure.kind == "value"
    assert failure.message == ("the result's part 0 (Image): mime_type 'image' is not a MIME "
                               "type (type/subtype, RFC 6838)")
