"""The words a call refused over a quota or a rate limit is answered with:
whose limit, how much of it is used, and when it frees up. Kept apart from
the ledger's decision (quota.py), which is numbers, not sentences.
"""

from __future__ import annotations

from staal.manifest.model import Tool
from staal.runtime.utc import for_people
from staal.supervisor.store.entries import Admission, OverQuota


def quota_text(tool: Tool, over: OverQuota, admission: Admission | None = None) -> str:
    whose = {"tool": f"tool '{tool.name}' is over its quota",
             "caller": f"this caller is over its quota on tool '{tool.name}'",
             "rate": "this caller is over its rate limit"}[over.scope]
    limit = tool.quota if admission is None or over.scope == "tool" else \
        (admission.rate if over.scope == "rate" else admission.quota)
    window = limit.window.text if limit is not None else "?"
    if over.frees_at_ms is None:
        when = "this call alone needs more than the whole quota"
    else:
        when = f"it frees up at {for_people(over.frees_at_ms)}"
    if over.which == "calls":
        used = f"{over.in_use} of {over.limit} calls per {window} are used"
    else:
        used = f"{over.in_use} of {over.limit} per {window} is held or spent"
    return f"{whose}: {used}; {when}"
