"""Recovery's plan for one run, from its rows (supervisor/recovery/at_start.py,
`_plan_unsettled`, used at start, by a takeover and by settling in place):
what the process that now holds the run does first."""

from __future__ import annotations

from tests.lease_model.state import (
    ANSWER,
    END,
    HEADER,
    INTENT,
    NEXT_END,
    NEXT_INTENT,
    NEXT_RELEASE,
    NEXT_SETTLE,
    NEXT_WAIT,
    OUTCOME,
    Run,
    Variant,
)


def plan(r: Run, variant: Variant) -> str | None:
    """None for an ended run (ledger.mine: only unsettled runs are planned).
    A journal without its header: the run never started, release it. An
    ended journal: settle from its end. An op in doubt (an intent with no
    outcome and no answer): resume, and it stops at the op again (its
    waiting record). Else resume after the last record."""
    if r.end:
        return None
    if HEADER not in r.journal:
        return NEXT_RELEASE
    if END in r.journal:
        return NEXT_SETTLE
    if INTENT not in r.journal:
        return NEXT_INTENT
    if not in_doubt(r.journal):
        return NEXT_END
    # The broken variant runs the op again, as if nothing were in doubt.
    return NEXT_INTENT if variant.redo_in_doubt else NEXT_WAIT


def in_doubt(journal: str) -> bool:
    """The last op's intent has neither an outcome nor an answer after it."""
    last = journal.rfind(INTENT)
    return last >= 0 and OUTCOME not in journal[last:] and ANSWER not in journal[last:]
