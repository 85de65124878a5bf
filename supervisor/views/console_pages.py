"""The console's pages: plain HTML rendered on the server, charts drawn as
SVG here (no script, no build step, nothing fetched from elsewhere).

Every text that comes from a file (a tool name, a print, a message) passes
through `esc`, so a `<script>` a program printed shows as text. The
elements tests and scripts look for carry `data-` attributes, so the
layout can change without breaking them.
"""

from __future__ import annotations

import html
from urllib.parse import quote

from staal.runtime.utc import for_people
from staal.supervisor.views.console_data import Overview, QuotaChart, RunRow, WaitingRun
from staal.supervisor.views.timeline import Event, Timeline

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d2330;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse}td,th{padding:.2em .7em;border-bottom:1px solid #dde;text-align:left}
code{background:#f1f2f6;padding:.1em .3em;border-radius:3px;word-break:break-all}
.waiting{border-left:4px solid #d08a00;padding:.3em .8em;margin:.5em 0;background:#fff8e8}
.muted{color:#667}a{color:#2050b0}td:first-child{white-space:nowrap}pre{white-space:pre-wrap;margin:.3em 0}
"""
COLOURS = {"op": "#3a6fd8", "value": "#7a8599", "print": "#2f9e6f", "stop": "#d08a00",
           "answer": "#8a4fd8", "end": "#1d2330"}
FAILED = "#c8372d"


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def when(ms: int | None) -> str:
    if ms is None:
        return ""
    return for_people(ms)


def page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{esc(title)}</title>"
            f"<style>{STYLE}</style></head><body>{body}</body></html>")


def error_page(status: int, message: str) -> str:
    return page(f"staal console: {status}",
                f"<h1>{status}</h1><p data-error>{esc(message)}</p><p><a href=/>the overview</a></p>")


# -- the overview --------------------------------------------------------------

def overview_page(data: Overview) -> str:
    server = (f"server running, pid {data.pid}" if data.running else "server not running")
    parts = [f"<h1>staal console</h1><p class=muted>{esc(server)}; journals "
             f"<code>{esc(data.journals)}</code>; read only, as of {esc(when(data.now_ms))}</p>",
             _waiting_section(data.waiting), _quota_section(data.quotas), _runs_section(data)]
    return page("staal console", "".join(parts))


def _waiting_section(waiting: tuple[WaitingRun, ...]) -> str:
    if not waiting:
        return "<h2>Waiting for an operator: none</h2>"
    items = "".join(
        f"<div class=waiting data-waiting-run='{esc(w.run)}'><p><a href='/runs/{quote(w.run)}'>"
        f"{esc(w.run)}</a> ({esc(w.tool)})</p><p>in doubt: <span data-in-doubt>{esc(w.in_doubt)}"
        f"</span></p><p>find out from the service, then run:<br><code data-resolve>{esc(w.resolve)}"
        "</code></p></div>" for w in waiting)
    return f"<h2>Waiting for an operator: {len(waiting)}</h2>{items}"


def _quota_section(quotas: tuple[QuotaChart, ...]) -> str:
    if not quotas:
        return "<h2>Quotas: none</h2>"
    return "<h2>Quotas</h2>" + "".join(quota_chart(q) for q in quotas)


def _window(ms: int) -> str:
    return f"{ms // 60000} min" if ms < 3_600_000 else f"{ms // 3_600_000} h"


def quota_chart(quota: QuotaChart) -> str:
    """Calls per twelfth of the window as bars, the limit as a line."""
    width, height, left, bottom = 480, 120, 30, 20
    top = max(*quota.buckets, quota.calls_limit or 0, 1)
    slot = (width - left) / len(quota.buckets)
    plot = height - bottom - 10
    bars = []
    for index, count in enumerate(quota.buckets):
        h = plot * count / top
        x = left + index * slot
        bars.append(f"<rect data-bucket={index} data-calls={count} x={x + 2:.1f} "
                    f"y={height - bottom - h:.1f} width={slot - 4:.1f} height={h:.1f} "
                    f"fill='#3a6fd8'><title>{count} calls</title></rect>")
    limit = ""
    if quota.calls_limit:
        y = height - bottom - plot * quota.calls_limit / top
        limit = (f"<line data-limit={quota.calls_limit} x1={left} x2={width} y1={y:.1f} "
                 f"y2={y:.1f} stroke='{FAILED}' stroke-dasharray='4 3'/>"
                 f"<text x={left - 4} y={y + 4:.1f} text-anchor=end font-size=10>"
                 f"{quota.calls_limit}</text>")
    axis = (f"<line x1={left} x2={width} y1={height - bottom} y2={height - bottom} stroke='#99a'/>"
            f"<text x={left} y={height - 4} font-size=10>{_window(quota.window_ms)} ago</text>"
            f"<text x={width} y={height - 4} font-size=10 text-anchor=end>now</text>")
    limit_text = f" of {quota.calls_limit}" if quota.calls_limit else ""
    money = f"; {esc(quota.money)}" if quota.money else ""
    return (f"<figure data-quota='{esc(quota.tool)}' data-calls={quota.calls}>"
            f"<figcaption><b>{esc(quota.tool)}</b>: {quota.calls}{limit_text} calls in the last "
            f"{_window(quota.window_ms)}{money}</figcaption>"
            f"<svg xmlns='http://www.w3.org/2000/svg' width={width} height={height} role=img "
            f"aria-label='calls of {esc(quota.tool)} over its window'>{''.join(bars)}{limit}{axis}"
            "</svg></figure>")


def _runs_section(data: Overview) -> str:
    search = (f"<form method=get action=/><input name=q value='{esc(data.query)}' size=30 "
              "placeholder='run id, tool or state'> <button>search</button></form>")
    shown = len(data.runs)
    count = f"{data.matched} runs" + (f", the newest {shown} shown" if shown < data.matched else "")
    if data.query:
        count += f" matching <q>{esc(data.query)}</q>"
    rows = "".join(_run_row(row) for row in data.runs)
    return (f"<h2>Recent runs</h2>{search}<p data-matched={data.matched}>{count}</p>"
            f"<table data-runs><tr><th>run</th><th>tool</th><th>state</th><th>reserved</th>"
            f"<th>ended</th></tr>{rows}</table>")


def _run_row(row: RunRow) -> str:
    return (f"<tr data-run='{esc(row.run)}' data-state='{esc(row.state)}'>"
            f"<td><a href='/runs/{quote(row.run)}'>{esc(row.run)}</a></td><td>{esc(row.tool)}</td>"
            f"<td>{esc(row.state)}</td><td>{esc(when(row.reserved_ms))}</td>"
            f"<td>{esc(when(row.ended_ms))}</td></tr>")


# -- a run ---------------------------------------------------------------------

def run_page(row: RunRow, line: Timeline, waiting: WaitingRun | None) -> str:
    head = (f"<p><a href=/>the overview</a></p><h1>run <span data-run-id>{esc(row.run)}</span></h1>"
            f"<p>tool <b>{esc(row.tool)}</b>; state <b data-state>{esc(row.state)}</b>; reserved "
            f"{esc(when(row.reserved_ms))}</p>")
    if waiting is not None:
        head += (f"<div class=waiting><p>in doubt: {esc(waiting.in_doubt)}</p><p>find out from "
                 f"the service, then run:<br><code data-resolve>{esc(waiting.resolve)}</code></p></div>")
    if line.problem is not None:
        return page(f"run {row.run}", head + f"<p data-problem>{esc(line.problem)}</p>")
    body = head + "<h2>Timeline</h2>" + timeline_svg(line) + _events_table(line)
    return page(f"run {row.run}", body)


def timeline_svg(line: Timeline) -> str:
    """One row per event: an op's bar runs from its intent to its outcome
    (to the right edge while in doubt), an instant is a diamond."""
    width, row_h, left = 720, 22, 230
    span = max(line.span_ms, 1)
    scale = (width - left - 20) / span
    height = row_h * len(line.events) + 24
    rows = []
    for index, event in enumerate(line.events):
        y = 8 + index * row_h
        x = left + event.start_ms * scale
        colour = FAILED if event.ok is False and event.kind in ("op", "end") else COLOURS[event.kind]
        label = f"<text x=4 y={y + 13} font-size=11>{esc(_short(event.label, 34))}</text>"
        if event.kind == "op":
            end = width - 20 if event.end_ms is None else left + event.end_ms * scale
            dash = " stroke-dasharray='3 2' fill-opacity=0.3" if event.end_ms is None else ""
            shape = (f"<rect x={x:.1f} y={y + 3} width={max(end - x, 3):.1f} height={row_h - 8} "
                     f"fill='{colour}' stroke='{colour}'{dash}/>")
        else:
            shape = (f"<path d='M{x:.1f} {y + 3} l6 7 l-6 7 l-6 -7 z' fill='{colour}'/>")
        rows.append(f"<g data-event={index} data-kind={event.kind}>{label}{shape}"
                    f"<title>{esc(event.label)}: {esc(event.detail)}</title></g>")
    axis = (f"<text x={left} y={height - 4} font-size=10>0 ms</text><text x={width - 20} "
            f"y={height - 4} font-size=10 text-anchor=end>{line.span_ms} ms</text>")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width={width} height={height} role=img "
            f"aria-label='the run over time' data-timeline>{''.join(rows)}{axis}</svg>")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _events_table(line: Timeline) -> str:
    rows = "".join(_event_row(index, event) for index, event in enumerate(line.events))
    return (f"<table data-events><tr><th>at</th><th>what</th><th>detail</th></tr>{rows}</table>"
            f"<p class=muted>started {esc(when(line.started_ms))}; times from the run's start. "
            "Argument values and results are not shown.</p>")


def _event_row(index: int, event: Event) -> str:
    until = "in doubt" if event.end_ms is None else (
        f"{event.start_ms}–{event.end_ms} ms" if event.end_ms != event.start_ms else
        f"{event.start_ms} ms")
    ok = "" if event.ok is None else f" data-ok={'yes' if event.ok else 'no'}"
    op = "" if event.op is None else f" data-op={event.op}"
    return (f"<tr data-event={index} data-kind={event.kind}{op}{ok}><td>{esc(until)}</td>"
            f"<td>{esc(event.label)}</td><td data-detail>{esc(event.detail)}{_frames(event)}</td></tr>")


def _frames(event: Event) -> str:
    if not event.traceback:
        return ""
    return f"<pre data-traceback>{esc(chr(10).join(event.traceback))}</pre>"
