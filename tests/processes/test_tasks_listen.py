"""Task status notifications (issue 28 item 1): in 2026-07-28 a client
listens for its tasks with subscriptions/listen (the tasks extension's
`taskIds`), over stdio and Streamable HTTP. The stream is acknowledged
first, naming the tasks it follows; then each task comes as it stands
(`notifications/tasks`, the DetailedTask tasks/get answers), in order:
working, then completed with its result or cancelled, every message tagged
with the stream's id; a stream the client cancelled hears nothing more.
Over authenticated HTTP a task is followed only for
the caller that created it: another caller's stream leaves it out of its
acknowledgement and receives nothing of it. When the server stops, a stream
still open ends with the listen request's result."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import orjson

from staal.protocol.mcp.revisions import CLIENT_CAPABILITIES_KEY
from staal.protocol.mcp.tasks import TASKS_EXTENSION
from staal.protocol.subscriptions.listen import SUBSCRIPTION_ID_KEY
from tests.helpers.http_servers import HttpServer, modern_headers
from tests.helpers.payments import Payments
from tests.helpers.recorder import WAIT
from tests.helpers.servers import RawServer, modern_meta
from tests.processes.test_callers_http import As, callers_site, ops, support
from tests.processes.test_tasks_cancel import cancel_site, held_run
from tests.processes.test_tasks_http import NOBODYS

WITH_TASKS = {"_meta": {CLIENT_CAPABILITIES_KEY: {"extensions": {TASKS_EXTENSION: {}}}}}
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"


def on_stream(message: dict[str, Any], listen_id: Any) -> bool:
    """Whether `message` belongs to listen stream `listen_id`."""
    meta = (message.get("params") or message.get("result") or {}).get("_meta") or {}
    return meta.get(SUBSCRIPTION_ID_KEY) == listen_id


def statuses(messages: list[dict[str, Any]], task_id: str) -> list[str]:
    return [m["params"]["status"] for m in messages
            if m.get("method") == "notifications/tasks" and m["params"]["taskId"] == task_id]


def test_a_stdio_listener_hears_each_of_its_tasks_working_then_completed_or_cancelled(
        tmp_path, payments: Payments):
    site = cancel_site(tmp_path, payments)
    payments.fault("/v1/refunds", "hang", times=2)
    with RawServer(site, {"STRIPE_SECRET_KEY": payments.key}) as server:
        server.initialize()
        finishing = held_run(server, payments, modern=True)
        cancelled = server.call("tools/call", {
            "name": "refund_then_read", **WITH_TASKS,
            "arguments": {"order": payments.intent(amount=5000)["id"],
                          "amount": {"amount": "20.00", "currency": "USD"}}},
            modern=True)["result"]["taskId"]
        payments.wait("/v1/refunds", held=2)
        refused = server.call("subscriptions/listen", {"notifications": {"taskIds": [finishing]}},
                              modern=True)
        assert refused["error"]["code"] == -32021  # task ids without the extension declared
        listen = server.request("subscriptions/listen", {
            **WITH_TASKS, "notifications": {"taskIds": [finishing, NOBODYS, cancelled],
                                            "toolsListChanged": True}}, modern=True)

        heard: list[dict[str, Any]] = []

        def hear() -> dict[str, Any]:
            heard.append(server.next_message(lambda m: on_stream(m, listen), "a listen message"))
            return heard[-1]

        ack = hear()
        assert ack["method"] == ACKNOWLEDGED  # first, and only the tasks it follows
        assert ack["params"]["notifications"] == {"taskIds": [finishing, cancelled]}
        while len(heard) < 3:
            hear()
        assert statuses(heard, finishing) == statuses(heard, cancelled) == ["working"]
        dropped = server.request("subscriptions/listen", {
            **WITH_TASKS, "notifications": {"taskIds": [finishing]}}, modern=True)
        for _ in range(2):  # its acknowledgement, then the task working
            server.next_message(lambda m: on_stream(m, dropped), "the second stream's message")
        server.notify("notifications/cancelled", {"requestId": dropped})  # read before what follows
        server.call("tasks/cancel", {"taskId": cancelled, **WITH_TASKS}, modern=True)
        server.stderr.wait_event("run_cancel_asked", run=cancelled)
        payments.release()
        while not {"completed"} <= set(statuses(heard, finishing)) \
                or "cancelled" not in statuses(heard, cancelled):
            hear()
        assert statuses(heard, finishing) == ["working", "completed"]
        assert statuses(heard, cancelled) == ["working", "cancelled"]
        done = next(m["params"] for m in heard if m["params"].get("status") == "completed")
        got = server.call("tasks/get", {"taskId": finishing, **WITH_TASKS}, modern=True)["result"]
        assert done["result"] == got["result"] and done["result"]["isError"] is False
        server.close_stdin()  # serving ends: the stream still open is answered, and ends
        end = hear()
        assert end["id"] == listen and end["result"]["resultType"] == "complete"
        assert server.wait_exit() == 0
    assert all(m["method"] in (ACKNOWLEDGED, "notifications/tasks") for m in heard[:-1])
    on_dropped = [m for m in server.messages() if isinstance(m, dict) and on_stream(m, dropped)]
    assert [m.get("method") for m in on_dropped] == [ACKNOWLEDGED, "notifications/tasks"]


class Listener:
    """A subscriptions/listen event stream over HTTP, read in a thread to
    its end: every message it carried, in order."""

    def __init__(self, http: HttpServer, caller: As, task_ids: list[str], listen_id: int) -> None:
        params = {"notifications": {"taskIds": task_ids},
                  "_meta": {**modern_meta(), **WITH_TASKS["_meta"]}}
        self.body = {"jsonrpc": "2.0", "id": listen_id, "method": "subscriptions/listen",
                     "params": params}
        self.headers = {**modern_headers("subscriptions/listen", params), **caller.headers}
        self.url = http.url
        self.messages: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        self.ended = threading.Event()
        self.status = 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            with httpx.Client(timeout=httpx.Timeout(WAIT, read=None), trust_env=False) as client, \
                    client.stream("POST", self.url, content=orjson.dumps(self.body),
                                  headers=self.headers) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        with self.arrived:
                            self.messages.append(orjson.loads(line[5:]))
                            self.arrived.notify_all()
        finally:
            self.ended.set()
            with self.arrived:
                self.arrived.notify_all()

    def until(self, done: Any) -> list[dict[str, Any]]:
        """The messages once `done(messages)` holds, within WAIT."""
        with self.arrived:
            assert self.arrived.wait_for(lambda: done(self.messages) or self.ended.is_set(), WAIT)
            assert done(self.messages), self.messages
            return list(self.messages)

    def to_the_end(self) -> list[dict[str, Any]]:
        assert self.ended.wait(WAIT), "the listen stream did not end"
        self.thread.join(WAIT)
        return list(self.messages)


def test_over_authenticated_http_only_the_tasks_creator_hears_it_working_then_completed(
        tmp_path, service, authorization):
    site = callers_site(tmp_path, service, authorization.issuer)
    site.set_tool("lookup", task="optional")
    held = service.hold("/orders/1")
    with HttpServer(site) as http:
        owner, other = ops(http, authorization), support(http, authorization)
        created = http.modern("tools/call", {"name": "lookup",
                                             "arguments": {"url": service.base + "/orders/1"}},
                              headers=owner.headers, **WITH_TASKS["_meta"]).json()["result"]
        assert created["resultType"] == "task", created
        task_id = created["taskId"]
        assert held.arrived.wait(WAIT)
        stranger = Listener(http, other, [task_id], 7)
        assert stranger.until(lambda ms: len(ms) >= 1)[0]["params"]["notifications"] == {"taskIds": []}
        listener = Listener(http, owner, [task_id], 8)
        first = listener.until(lambda ms: len(ms) >= 2)
        assert listener.status == 200 and first[0]["method"] == ACKNOWLEDGED
        assert first[0]["params"]["notifications"] == {"taskIds": [task_id]}
        held.release.set()
        heard = listener.until(lambda ms: "completed" in statuses(ms, task_id))
        assert statuses(heard, task_id) == ["working", "completed"]
        assert all(on_stream(m, 8) for m in heard)
        assert heard[-1]["params"]["result"]["structuredContent"] == {"result": {"status": 200}}
        http.terminate()  # the server stops: each stream still open ends with its result
        ended = stranger.to_the_end()
        assert [m.get("method", "result") for m in ended] == [ACKNOWLEDGED, "result"]
        assert ended[-1]["id"] == 7 and on_stream(ended[-1], 7)
        assert listener.to_the_end()[-1]["id"] == 8
