"""Content parts as records (staal.records.content): their shape checked
when made and when read back, and their round trip through the journal's
end record and the worker's `ended` message, byte for byte."""

from __future__ import annotations

import orjson
import pytest

from staal.errors import RecordError
from staal.journal.records import JOURNAL, End
from staal.records.messages import Ended, pack, report_of, unpack
from staal.records.outcomes import Failure
from tests.helpers.content_parts import PARTS

RUN = "0123456789abcdef0123456789abcdef"


def test_an_end_record_with_content_reads_back_equal_and_writes_the_same_bytes():
    end = End(outcome="done", time=1, content=PARTS)
    line = orjson.dumps(JOURNAL.encode(end))
    read = JOURNAL.decode(orjson.loads(line))
    assert read == end
    assert orjson.dumps(JOURNAL.encode(read)) == line


def test_the_worker_reports_a_journaled_ends_content_unchanged():
    end = End(outcome="done", time=1, content=PARTS)
    message = report_of(RUN, end)
    assert isinstance(message, Ended) and message.content == PARTS
    assert unpack(pack(message)) == message


def test_an_end_without_content_is_written_as_before():
    assert "content" not in JOURNAL.encode(End(outcome="done", time=1, result={"a": 1}))


@pytest.mark.parametrize(("data", "field", "problem"), [
    ({"type": "image", "data": "not base64!", "mime_type": "image/png"}, "content[0].data",
     "expected base64"),
    ({"type": "image", "data": "iVBO", "mime_type": "text/plain"}, "content[0].mime_type",
     "is not an image type"),
    ({"type": "video", "data": "iVBO", "mime_type": "video/mp4"}, "content[0].type",
     "expected one of"),
    ({"type": "resource", "uri": "test://r"}, "content[0].text", "either text or data"),
    ({"type": "text", "text": "a", "uri": "test://r"}, "content[0].uri", "a text part has no uri"),
    ({"type": "audio", "data": "iVBO"}, "content[0].mime_type", "an audio part needs mime_type"),
    ({"type": "resource", "uri": "r", "text": "a"}, "content[0].uri", "not an absolute URI"),
])
def test_a_malformed_part_read_back_is_refused_naming_its_field(data, field, problem):
    line = {"v": 1, "type": "end", "outcome": "done", "time": 1, "content": [data]}
    with pytest.raises(RecordError) as refused:
        JOURNAL.decode(line)
    assert problem in refused.value.reason
    assert refused.value.path == field


def test_content_belongs_to_a_done_run_in_place_of_a_json_result():
    with pytest.raises(RecordError, match="only a done outcome has content"):
        End(outcome="failed", time=1, failure=Failure("value", "x"), content=PARTS)
    with pytest.raises(RecordError, match="not both"):
        End(outcome="done", time=1, result={"a": 1}, content=PARTS)
    with pytest.raises(RecordError, match="not both"):
        Ended(run=RUN, outcome="done", result=[1], content=PARTS)
