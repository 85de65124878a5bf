from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from staal.errors import DurationError
from staal.manifest.durations import MAX_MS, UNIT_MS, Duration


@pytest.mark.parametrize(
    "text, ms",
    [("120s", 120_000), ("90m", 5_400_000), ("24h", 86_400_000), ("30d", 2_592_000_000), ("1s", 1000)],
)
def test_a_whole_number_and_a_unit_is_a_duration(text, ms):
    assert Duration.parse(text).ms == ms
    assert str(Duration.parse(text)) == text


@given(st.integers(min_value=1, max_value=36_500), st.sampled_from("smhd"))
def test_every_whole_number_of_every_unit_parses_to_its_milliseconds(count, unit):
    duration = Duration.parse(f"{count}{unit}")
    assert duration.ms == count * UNIT_MS[unit]


@pytest.mark.parametrize(
    "text", ["", "120", "s", "1.5h", "-1s", "0s", "10 s", "10S", "1w", "1h30m", "120s\n", 120, None,
             "99999999999d"]
)
def test_anything_else_is_refused(text):
    with pytest.raises(DurationError) as caught:
        Duration.parse(text)
    assert caught.value.kind == "duration"


def test_a_field_can_take_only_some_units():
    assert Duration.parse("30d", units="mhd").ms == 30 * UNIT_MS["d"]
    with pytest.raises(DurationError):
        Duration.parse("120s", units="mhd")


def test_durations_are_bounded_to_a_hundred_years():
    assert Duration.parse("36500d").ms == MAX_MS
    with pytest.raises(DurationError):
        Duration.parse("36501d")
