"""The content parts a program returns (staal.content): which returned
values are content, the checks on each part, naming its index, and the
record each becomes, its bytes base64."""

from __future__ import annotations

import base64

import pytest

from staal import Audio, EmbeddedResource, Image, Money, Text
from staal.content import content_of
from staal.errors import ContentError
from staal.records.content import ContentPart

PNG = b"\x89PNG\r\n\x1a\n\x00\x00"
WAV = b"RIFF\x24\x00\x00\x00WAVE"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def refusal(returned: object) -> str:
    with pytest.raises(ContentError) as refused:
        content_of(returned)
    return refused.value.message


def test_a_list_of_text_image_audio_and_resources_becomes_parts_in_the_order_given():
    parts = content_of(["a chart", Image(PNG, "image/png"), Text("then audio"),
                        Audio(WAV, "audio/wav"),
                        EmbeddedResource("file:///notes.txt", text="hi", mime_type="text/plain"),
                        EmbeddedResource("https://example.com/a.pdf", blob=b"%PDF-1.7",
                                         mime_type="application/pdf")])
    assert parts == (
        ContentPart("text", text="a chart"),
        ContentPart("image", data=b64(PNG), mime_type="image/png"),
        ContentPart("text", text="then audio"),
        ContentPart("audio", data=b64(WAV), mime_type="audio/wav"),
        ContentPart("resource", text="hi", mime_type="text/plain", uri="file:///notes.txt"),
        ContentPart("resource", data=b64(b"%PDF-1.7"), mime_type="application/pdf",
                    uri="https://example.com/a.pdf"),
    )


def test_one_part_returned_alone_is_a_result_of_one_part():
    assert content_of(Image(bytearray(PNG), "image/png")) == (
        ContentPart("image", data=b64(PNG), mime_type="image/png"),)


@pytest.mark.parametrize("returned", [{"a": 1}, ["a", "b"], [], "text", None, 3,
                                      [Money("1", "USD")], ({"image": "x"},)])
def test_a_value_with_no_part_in_it_is_no_content_and_stays_a_json_result(returned):
    assert content_of(returned) is None


def test_bytes_are_carried_as_standard_padded_base64_that_decodes_to_them():
    data = bytes(range(256)) * 3 + b"\xff"
    (part,) = content_of([Image(data, "image/webp")])
    assert part.data is not None and part.data.endswith("=")
    assert base64.b64decode(part.data, validate=True) == data


@pytest.mark.parametrize(("part", "problem"), [
    (Image(PNG, "text/plain"), "part 1 (Image): mime_type 'text/plain' is not an image type"),
    (Image(PNG, "audio/wav"), "part 1 (Image): mime_type 'audio/wav' is not an image type"),
    (Audio(WAV, "image/png"), "part 1 (Audio): mime_type 'image/png' is not an audio type"),
    (Image(PNG, "png"), "part 1 (Image): mime_type 'png' is not a MIME type"),
    (Image(PNG, "image/"), "part 1 (Image): mime_type 'image/' is not a MIME type"),
    (Image(PNG, "image/png\n"), "part 1 (Image): mime_type 'image/png\\n' is not a MIME type"),
    (Image(PNG, None), "part 1 (Image): mime_type is a string"),  # type: ignore[arg-type]
    (Image("iVBORw0KGgo=", "image/png"),  # type: ignore[arg-type]
     "part 1 (Image): data is the bytes themselves (bytes), not a str"),
    (Image(b"", "image/png"), "part 1 (Image): data is empty"),
    (Audio([1, 2], "audio/wav"), "part 1 (Audio): data is bytes, not list"),  # type: ignore[arg-type]
    (EmbeddedResource("notes.txt", text="hi"),
     "part 1 (EmbeddedResource): uri 'notes.txt' is not an absolute URI"),
    (EmbeddedResource("file:///a b", text="hi"),
     "part 1 (EmbeddedResource): uri 'file:///a b' is not an absolute URI"),
    (EmbeddedResource("file:///a", text="hi", blob=b"x"),
     "part 1 (EmbeddedResource): give text or blob (its bytes), one of the two"),
    (EmbeddedResource("file:///a"), "part 1 (EmbeddedResource): give text or blob"),
    (EmbeddedResource("file:///a", blob=b"x", mime_type="pdf"),
     "part 1 (EmbeddedResource): mime_type 'pdf' is not a MIME type"),
    (Text(3), "part 1 (Text): text is a str, not int"),  # type: ignore[arg-type]
])
def test_a_part_that_cannot_be_answered_is_refused_naming_its_index_and_what_was_wrong(
        part, problem):
    assert refusal(["first", part]).startswith(problem)


def test_a_value_among_parts_that_is_not_a_part_is_refused_naming_its_index():
    message = refusal([Image(PNG, "image/png"), "text", {"a": 1}])
    assert message.startswith("part 2: a dict is not a content part")
    assert "staal.Image" in message


def test_mime_types_may_have_parameters_and_any_case():
    parts = content_of([Audio(WAV, 'Audio/L16; rate=8000; channels="1"'),
                        EmbeddedResource("data:,x", text="x", mime_type="text/plain; charset=utf-8")])
    assert parts is not None and parts[0].mime_type == 'Audio/L16; rate=8000; channels="1"'
