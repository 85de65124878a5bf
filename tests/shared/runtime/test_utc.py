"""shared/runtime/utc.py: one way a time is written for people, one for
machines, both in UTC to the millisecond a record holds."""

from __future__ import annotations

from staal.runtime.utc import for_machines, for_people

# 2025-11-29 21:49:18.518 UTC
MS = 1_764_452_958_518


def test_people_read_a_time_as_date_time_and_milliseconds_in_utc():
    assert for_people(MS) == "2025-11-29 21:49:18.518 UTC"
    assert for_people(MS - 518) == "2025-11-29 21:49:18.000 UTC"


def test_machines_read_iso_8601_with_or_without_the_milliseconds():
    assert for_machines(MS) == "2025-11-29T21:49:18.518Z"
    assert for_machines(MS + 481, millis=False) == "2025-11-29T21:49:18Z"  # never rounded up
