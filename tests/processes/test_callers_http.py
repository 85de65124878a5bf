"""Per-caller admission over HTTP against a real authorization server
(issue 14 items 4 and 5): the first caller profile whose `when` matches a
token decides the tools it sees and may call and the grant set each runs
with; once keys, run status, quotas and the rate are the caller's own, kept
in the ledger (so across restarts). Every refusal proves nothing ran."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from staal.supervisor.auth.principal import Principal
from staal.supervisor.store.ledger import read_ledger
from tests.helpers.authorization import AuthorizationServer
from tests.helpers.http_servers import HttpServer
from tests.helpers.recorder import Recorder
from tests.helpers.servers import SERVER_NAME, Site

LOOKUP = """
from staal.caps import HttpGet

def main(url: str, get: HttpGet) -> dict:
    return {"status": get.get(url).status_code}
"""
REFUND = """
from staal.caps import HttpPost

def main(order: str, post: HttpPost) -> dict:
    return {"status": post.post(BASE + "/refunds", json={"order": order}).status_code}
"""
ECHO = """
def main(text: str) -> dict:
    return {"echo": text}
"""


def callers_site(tmp_path, service: Recorder, issuer: str) -> Site:
    for path in ("/orders/1", "/public/1"):
        service.route("GET", path)
    service.route("POST", "/refunds")
    site = Site(tmp_path)
    site.program("lookup.py", LOOKUP)
    site.program("refund.py", f"BASE = {service.base!r}\n" + REFUND)
    site.program("echo.py", ECHO)
    everything = {"get": {"cap": "net.http.get", "only": [service.base + "/**"]}}
    public = {"get": {"cap": "net.http.get", "only": [service.base + "/public/**"]}}
    site.write(
        [{"name": "lookup", "program": "lookup.py", "grants": everything,
          "profiles": {"public": public}},
         {"name": "refund", "program": "refund.py", "once": {"by": ["order"]},
          "grants": {"post": {"cap": "net.http.post", "only": [service.base + "/refunds"]}}},
         {"name": "echo", "program": "echo.py"}],
        sections={
            "auth": {"issuer": issuer},
            "callers": [
                {"name": "support", "when": {"scope": "support"},
                 "tools": {"lookup": {"grants": "public"}, "refund": {}},
                 "rate": {"calls": 3, "window": "1h"}},
                {"name": "ops", "when": {"client_id": "ops-bot"},
                 "tools": {"lookup": {}, "echo": {},
                           "refund": {"quota": {"window": "1h", "calls": 1}}}},
            ]})
    return site


@pytest.fixture
def site(tmp_path, service, authorization) -> Site:
    return callers_site(tmp_path, service, authorization.issuer)


@pytest.fixture
def http(site) -> Iterator[HttpServer]:
    with HttpServer(site) as server:
        yield server


class As:
    """Requests to the server with one caller's token."""

    def __init__(self, http: HttpServer, token: str) -> None:
        self.http = http
        self.headers = {"authorization": f"Bearer {token}"}

    def list(self) -> list[str]:
        answer = self.http.modern("tools/list", headers=self.headers)
        assert answer.status_code == 200, answer.text
        return [tool["name"] for tool in answer.json()["result"]["tools"]]

    def call(self, name: str, arguments: dict[str, Any], legacy: bool = False) -> httpx.Response:
        params = {"name": name, "arguments": arguments}
        if legacy:
            return self.http.legacy("tools/call", params, headers=self.headers)
        return self.http.modern("tools/call", params, headers=self.headers)

    def result(self, name: str, arguments: dict[str, Any], legacy: bool = False) -> dict[str, Any]:
        answer = self.call(name, arguments, legacy)
        assert answer.status_code == 200, answer.text
        return answer.json()["result"]


def support(http: HttpServer, authorization: AuthorizationServer, client: str = "desk-1") -> As:
    return As(http, authorization.token(client, "support", http.url))


def ops(http: HttpServer, authorization: AuthorizationServer) -> As:
    return As(http, authorization.token("ops-bot", audience=http.url))


def identity(authorization: AuthorizationServer, client: str) -> str:
    return Principal(authorization.issuer, client, client).identity


def runs(http: HttpServer) -> tuple:
    return read_ledger(http.site.ledger_path).runs()


# -- tools and grants ------------------------------------------------------------------------


def test_each_profile_lists_only_its_own_tools(http, authorization):
    assert support(http, authorization).list() == ["lookup", "refund", "staal_run_status"]
    assert ops(http, authorization).list() == ["lookup", "refund", "echo", "staal_run_status"]


@pytest.mark.parametrize("legacy", [False, True])
def test_a_tool_outside_the_profile_is_an_unknown_tool_and_nothing_runs(http, service,
                                                                        authorization, legacy):
    answer = support(http, authorization).call("echo", {"text": "hi"}, legacy)
    assert answer.json()["error"]["code"] == -32602
    assert answer.json()["error"]["message"] == "unknown tool: 'echo'"
    assert runs(http) == () and service.requests == []


def test_a_valid_token_no_profile_admits_is_403_and_nothing_runs(http, service, authorization):
    answer = As(http, authorization.token("stranger", "other", http.url)).call("lookup", {"url": "x"})
    assert answer.status_code == 403
    assert 'error="insufficient_scope"' in answer.headers["www-authenticate"]
    assert runs(http) == () and service.requests == []


def test_the_profile_picks_the_grant_set_a_run_runs_with(http, service, authorization):
    narrow = support(http, authorization).result("lookup", {"url": service.base + "/orders/1"})
    assert narrow["isError"] is True  # the "public" grant set reaches /public/** only
    assert service.requests == []
    assert support(http, authorization).result(
        "lookup", {"url": service.base + "/public/1"})["structuredContent"]["result"] == {"status": 200}
    wide = ops(http, authorization).result("lookup", {"url": service.base + "/orders/1"})
    assert wide["structuredContent"]["result"] == {"status": 200}
    assert [r.path for r in service.requests] == ["/public/1", "/orders/1"]
    by_grants = {(e.profile, e.grants) for e in runs(http)}
    assert by_grants == {("support", "public"), ("ops", None)}


# -- once keys and runs are the caller's own ---------------------------------------------------


def test_the_same_once_arguments_from_two_callers_are_two_runs_and_from_one_caller_one(
        http, service, authorization):
    first = support(http, authorization, "desk-1")
    other = support(http, authorization, "desk-2")
    a = first.result("refund", {"order": "A1"})["structuredContent"]
    b = other.result("refund", {"order": "A1"})["structuredContent"]
    assert len(runs(http)) == 2  # the same arguments from another caller: a run of its own
    again = first.result("refund", {"order": "A1"}, legacy=True)["structuredContent"]
    assert a == b == again == {"result": {"status": 200}}
    assert len(runs(http)) == 2  # the first caller's again: its earlier run's answer, whatever
    assert len(service.seen("POST", "/refunds")) == 2  # the revision it came by
    callers = sorted(e.caller for e in runs(http))
    assert callers == sorted([identity(authorization, "desk-1"), identity(authorization, "desk-2")])


def test_a_callers_run_is_unknown_to_another_caller(http, authorization):
    mine = support(http, authorization, "desk-1")
    assert mine.result("refund", {"order": "B2"})["isError"] is False
    (entry,) = runs(http)
    run = entry.run
    theirs = support(http, authorization, "desk-2").result("staal_run_status", {"run": run})
    assert theirs["structuredContent"] == {"run": run, "status": "unknown"}
    own = mine.result("staal_run_status", {"run": run})["structuredContent"]
    assert own["status"] == "done"


# -- rate and quotas, in the ledger ------------------------------------------------------------


def test_the_callers_rate_limit_refuses_past_it_and_holds_across_a_restart(site, service,
                                                                           authorization):
    with HttpServer(site) as http:
        caller = support(http, authorization)
        for n in range(3):
            assert caller.result("refund", {"order": f"R{n}"})["isError"] is False
        over = caller.result("refund", {"order": "R3"})
        assert over["isError"] is True and "over its rate limit: 3 of 3 calls per 1h" in \
            over["content"][0]["text"]
        # Another caller of the same profile has a rate of its own.
        assert support(http, authorization, "desk-9").result("refund", {"order": "R3"})["isError"] \
            is False
    with HttpServer(site) as http:
        again = support(http, authorization).result("refund", {"order": "R4"})
        assert again["isError"] is True and "rate limit" in again["content"][0]["text"]
        assert len(runs(http)) == 4
    assert len(service.seen("POST", "/refunds")) == 4


def test_a_callers_quota_on_a_tool_is_its_own(http, service, authorization):
    assert ops(http, authorization).result("refund", {"order": "Q1"})["isError"] is False
    over = ops(http, authorization).result("refund", {"order": "Q2"})
    assert over["isError"] is True
    assert "this caller is over its quota on tool 'refund': 1 of 1 calls per 1h" in \
        over["content"][0]["text"]
    assert support(http, authorization).result("refund", {"order": "Q2"})["isError"] is False
    assert [json.loads(r.body)["order"] for r in service.seen("POST", "/refunds")] == ["Q1", "Q2"]


def test_status_shows_each_callers_use_by_hash_and_profile(http, site, authorization):
    support(http, authorization).result("refund", {"order": "S1"})
    ops(http, authorization).result("refund", {"order": "S1"})
    done = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status",
                           str(site.manifest), "--json"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    callers = {c["caller"]: c for c in json.loads(done.stdout)["callers"]}
    desk, bot = identity(authorization, "desk-1"), identity(authorization, "ops-bot")
    assert set(callers) == {desk, bot}
    assert callers[desk]["profile"] == "support" and callers[desk]["rate"]["calls"] == 1
    assert callers[bot]["profile"] == "ops" and callers[bot]["quotas"][0]["calls"] == 1
    human = subprocess.run([sys.executable, "-m", "staal.supervisor.app.main", "status",
                            str(site.manifest)], capture_output=True, text=True, timeout=60,
                           check=False).stdout
    assert f"caller {desk} (profile support): runs 1" in human
    assert "desk-1" not in done.stdout + human  # the identity itself is never kept


# -- runs as resources are the caller's own ------------------------------------------------------


def test_a_callers_runs_as_resources_are_its_own_and_anothers_are_unknown(http, authorization):
    mine, theirs = support(http, authorization, "desk-1"), support(http, authorization, "desk-2")
    assert mine.result("refund", {"order": "C3"})["isError"] is False
    (entry,) = runs(http)
    base = f"staal://{SERVER_NAME}/runs"

    def read(caller: As, uri: str) -> httpx.Response:
        return http.modern("resources/read", {"uri": uri}, headers=caller.headers)

    def items(caller: As) -> list[str]:
        answer = read(caller, base)
        assert answer.status_code == 200, answer.text
        data = json.loads(answer.json()["result"]["contents"][0]["text"])
        return [item["run"] for item in data["items"]]

    assert items(mine) == [entry.run] and items(theirs) == []
    own = read(mine, f"{base}/{entry.run}")
    assert own.status_code == 200 and entry.run in own.text
    for uri in (f"{base}/{entry.run}", f"{base}/{entry.run}/journal"):
        refused = read(theirs, uri)
        # Answered exactly as a run that does not exist: its existence is not revealed.
        assert refused.json()["error"]["code"] == -32602, refused.text
        nobody = read(theirs, uri.replace(entry.run, "f" * 32))
        assert refused.json()["error"]["message"].replace(entry.run, "R") == \
            nobody.json()["error"]["message"].replace("f" * 32, "R")
    assert len(runs(http)) == 1  # reading ran nothing
