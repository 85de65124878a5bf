"""`staal run` end to end with a program that returns content parts: an
image with text, journaled as the end record's parts, answered again byte
for byte when the run is resumed after a crash and when an ended run is
resumed; and a part that cannot be answered, which fails the run."""

from __future__ import annotations

import base64

from tests.helpers.recorder import Recorder
from tests.helpers.runs import KILL_AT_OUTCOME, Workspace

CHART = """
from staal import Image
from staal.caps import HttpGet

def main(get: HttpGet) -> list:
    answer = get.get(BASE + "/chart").json()
    return [answer["title"], Image(bytes(answer["pixels"]), MIME)]
"""
PIXELS = [137, 80, 78, 71, 13, 10, 26, 10, 0, 255]


def chart(tmp_path, service: Recorder, mime: str = "image/png") -> Workspace:
    service.route("GET", "/chart", 200, {"title": "sales by month", "pixels": PIXELS})
    ws = Workspace(tmp_path)
    ws.program(f"BASE = {service.base!r}\nMIME = {mime!r}\n" + CHART)
    ws.config(grants={"get": {"cap": "net.http.get", "only": [service.base + "/chart"]}})
    return ws


def test_an_image_with_text_is_journaled_as_parts_and_resumed_runs_answer_the_same_bytes(
        tmp_path, service):
    ws = chart(tmp_path, service)
    assert ws.run(env=KILL_AT_OUTCOME).code == -9  # the GET journaled, the run not ended
    resumed = ws.resume()
    assert resumed.code == 0, resumed.stderr
    assert resumed.outcome["content"] == [
        {"type": "text", "text": "sales by month"},
        {"type": "image", "data": base64.b64encode(bytes(PIXELS)).decode(),
         "mime_type": "image/png"}]
    assert "result" not in resumed.outcome
    assert len(service.seen("GET", "/chart")) == 1  # replayed from the journal, not fetched
    (end,) = ws.records("end")
    assert end["content"] == resumed.outcome["content"] and "result" not in end
    shown = ws.staal("journal", "show", "run.journal")
    assert 'done: text "sales by month", image image/png 10 bytes' in shown.stdout
    again = ws.resume()  # an ended run answers from its end record
    assert again.stdout == resumed.stdout
    assert len(ws.records("end")) == 1 and len(service.seen("GET", "/chart")) == 1


def test_an_image_of_a_mime_type_that_is_not_an_image_fails_the_run_and_answers_no_content(
        tmp_path, service):
    ws = chart(tmp_path, service, mime="text/html")
    done = ws.run()
    assert done.code == 1
    assert done.outcome["failure"] == {
        "kind": "value",
        "message": "the result's part 1 (Image): mime_type 'text/html' is not an image type "
                   "(image/...)"}
    assert "content" not in done.outcome and "result" not in done.outcome
    (end,) = ws.records("end")
    assert end["outcome"] == "failed" and "content" not in end and "result" not in end
