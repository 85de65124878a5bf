"""Fixtures shared by the tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.recorder import Recorder


@pytest.fixture
def service() -> Iterator[Recorder]:
    recorder = Recorder().start()
    try:
        yield recorder
    finally:
        recorder.stop()
