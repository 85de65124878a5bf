"""shared/journal/disclosure.py: what each audience (the operator's console,
the caller's resources, `staal journal show`) may see of a journal is one
table over every record kind and every field; a kind or a field with no
row is an error, never left out."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import pytest

from staal.journal.disclosure import AUDIENCES, CALLER, DISCLOSURE, NoDisclosureRule, row, shown
from staal.journal.records import JOURNAL, Print
from staal.records.record import Record
from staal.supervisor.views.journal_view import record_data
from staal.supervisor.views.timeline import _event
from staal.worker.commands.journal_show import _record_lines


@dataclass(frozen=True)
class Unruled(Record):
    TYPE: ClassVar[str] = "unruled"
    secret: str = "s3cret"


def test_every_journal_record_kind_has_a_row_for_every_audience_and_every_field():
    missing = [kind.__name__ for kind in JOURNAL.types if kind not in DISCLOSURE]
    assert missing == [], "journal record kinds with no disclosure rule"
    for kind in JOURNAL.types:
        fields = {f.name for f in dataclasses.fields(kind)}
        for audience in AUDIENCES:
            assert set(DISCLOSURE[kind][audience]) == fields, (kind.__name__, audience)


def test_the_table_rules_no_kind_that_is_not_a_journal_record():
    assert set(DISCLOSURE) == set(JOURNAL.types)


def test_a_record_kind_with_no_row_stops_every_view_instead_of_being_left_out():
    with pytest.raises(NoDisclosureRule):
        record_data(Unruled(), "0" * 32)
    with pytest.raises(NoDisclosureRule):
        _event(Unruled(), 0, "0" * 32)
    with pytest.raises(NoDisclosureRule):
        _record_lines(Unruled(), None, {})


def test_a_field_an_audience_may_not_see_is_not_given_to_it():
    record = Print(seq=1, text="jane@example.com", time=1)
    assert row(record, CALLER)["text"] == "withheld"
    with pytest.raises(NoDisclosureRule):
        shown(record, "text", CALLER)
