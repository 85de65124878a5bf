"""Issue 15 item 5's cases that need journals in the shared store: three
`serve --http` instances on one PostgreSQL store behind HAProxy
(`tests/helpers/fleet.py`). The same `once` call sent to every instance at once is
one run; while it runs the others are told it is in progress (seed 000
section 5), and once it ended every instance, and the balancer, answers
from its end row. Afterwards every run has one reserve and one settle."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx

from tests.helpers.authorization import AuthorizationServer
from tests.helpers.fleet import fleet
from tests.helpers.flood import call_request, response_message
from tests.helpers.haproxy import INSTANCE_HEADER
from tests.helpers.pg_store import PgStore
from tests.helpers.recorder import WAIT
from tests.helpers.servers import Site
from tests.processes.test_store_serving import ENV, STORE

ORDER = """
from staal.caps import HttpGet

def main(order: str, get: HttpGet) -> dict:
    return {"order": order, "status": get.get(BASE + "/v1/orders/" + order).status_code}
"""


def answer_of(url: str, index: int, arguments: dict[str, Any],
              bearer: dict[str, str]) -> dict[str, Any]:
    body, headers = call_request(index, "order", arguments, "2025-11-25")
    with httpx.Client(timeout=WAIT * 3, trust_env=False) as client:
        got = client.post(url, content=body, headers={**headers, **bearer})
    assert got.status_code == 200, got.text
    message = response_message(got.content)
    assert message is not None and "result" in message, got.text
    return {"result": message["result"], "instance": got.headers.get(INSTANCE_HEADER)}


def test_the_same_once_call_sent_to_every_instance_at_once_is_one_run_answered_by_all(
        tmp_path: Path, service: Any, pg_store: PgStore,
        authorization: AuthorizationServer) -> None:
    program = tmp_path / "order.py"
    program.write_text(f"BASE = {service.base!r}\n" + ORDER)
    service.route("GET", "/v1/orders/o1", 200, {"id": "o1"})
    hold = service.hold("/v1/orders/o1")
    grants = {"get": {"cap": "net.http.get", "only": [service.base + "/v1/orders/*"]}}

    def write(site: Site, server: dict[str, Any]) -> None:
        site.write([{"name": "order", "program": str(program), "grants": grants,
                     "once": {"by": ["order"], "keep": "1h"}}], store=STORE, **server)

    with fleet(3, write, authorization, env={ENV: pg_store.dsn},
               root=tmp_path / "fleet") as running:
        answers: dict[str, dict[str, Any]] = {}
        answered = threading.Condition()

        def send(name: str, url: str) -> None:
            got = answer_of(url, 1, {"order": "o1"}, running.headers)
            with answered:
                answers[name] = got
                answered.notify_all()

        senders = [threading.Thread(target=send, args=(i.name, i.url), daemon=True)
                   for i in running.instances]
        for sender in senders:
            sender.start()
        assert hold.arrived.wait(WAIT)
        runs = pg_store.rows("SELECT run FROM staal_runs")
        # The two instances that did not reserve answer while the run is held.
        with answered:
            assert answered.wait_for(lambda: len(answers) == 2, WAIT * 3), answers
            refused = list(answers.values())
        hold.release.set()
        for sender in senders:
            sender.join(WAIT * 3)
        again = [answer_of(running.url, n, {"order": "o1"}, running.headers)
                 for n in range(2, 8)]
    ((run,),) = runs
    done = [a["result"] for a in answers.values() if not a["result"].get("isError")]
    assert len(done) == 1 and done[0]["structuredContent"]["result"] == {"order": "o1",
                                                                       "status": 200}
    for answer in refused:
        text = json.dumps(answer["result"])
        assert answer["result"]["isError"] is True and run in text and "in progress" in text
    assert {a["result"]["structuredContent"]["result"]["status"] for a in again} == {200}
    assert len({a["instance"] for a in again}) == 3  # answered by every instance
    assert len(service.seen("GET", "/v1/orders/o1")) == 1
    assert pg_store.rows("SELECT count(*), count(e.run) FROM staal_runs r "
                         "LEFT JOIN staal_ends e USING (run)") == [(1, 1)]
