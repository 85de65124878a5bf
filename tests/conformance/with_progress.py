"""The conformance suite's test_tool_with_progress: a tool that takes a few
journaled steps, each a progress notification when the call asks for it."""

from staal.caps import Clock


def main(clock: Clock) -> dict:
    first = clock.now()
    second = clock.now()
    return {"steps": 2, "ordered": first <= second}
