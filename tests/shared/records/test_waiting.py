"""shared/records/waiting.py: a run's waiting record, one type for both
stores, its JSON as it has always been written, and the resolve command
an operator runs, written in one place."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from staal.errors import RecordError
from staal.records.waiting import WaitingRecord

RUN = "0123456789abcdef0123456789abcdef"
JOURNAL = Path("/srv/journals/t/01") / f"{RUN}.journal"


def test_the_file_stores_record_names_its_journal_and_the_command_that_answers_it_there():
    record = WaitingRecord.in_files(RUN, "t", 2, "op 2: in doubt", 7, JOURNAL)
    assert list(orjson.loads(record.to_file())) == ["run", "tool", "op", "message", "journal",
                                                    "time", "resolve"]
    assert record.resolve == (f"staal resolve --journal {JOURNAL} --op 2 --happened yes "
                              "--result JSON   (or: --happened no)")
    assert WaitingRecord.from_file(record.to_file()) == record


def test_a_record_moved_to_the_store_names_its_instance_and_no_path_of_this_machine():
    moved = WaitingRecord.in_files(RUN, "t", 2, "op 2: in doubt", 7, JOURNAL).moved_to_store("a")
    assert moved == WaitingRecord.in_store(RUN, "t", 2, "op 2: in doubt", 7, "a")
    assert list(moved.to_json()) == ["run", "tool", "op", "message", "instance", "time", "resolve"]
    assert "/srv" not in moved.to_file().decode()
    assert moved.resolve.startswith(f"staal-supervisor resolve MANIFEST --run {RUN} --op 2 ")


@pytest.mark.parametrize("data", [b"{", b"[]", b'{"run": "x"}'])
def test_a_damaged_record_is_a_record_error(data):
    with pytest.raises(RecordError):
        WaitingRecord.from_file(data)
