"""The conformance suite's `slow_compute`: `seconds` of waiting (outside any
action, bounded by the run's max_wait: 15 s, so the suite's 60-second calls
end as deadline failures instead of holding the server), then a result;
answered as a task."""

import time


def main(seconds: int, label: str = "") -> dict:
    time.sleep(seconds)
    return {"label": label, "seconds": seconds}
