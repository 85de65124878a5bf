"""Resources in the sans-I/O protocol layer (issue 16): what a
`staal://<server>/...` URI refers to, signed cursors, the capability each
revision announces, the listings with 2026-07-28's caching fields, reads
handed to the application and answered in either revision, -32602 with
`data.uri` for anything not served, and garbage never more than an error."""

from __future__ import annotations

import base64
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from staal.protocol.http.endpoint import HEADER_MISMATCH, Endpoint, Read
from staal.protocol.mcp.connection import Connection, Send
from staal.protocol.mcp.cursors import CursorSigner
from staal.protocol.mcp.dispatch import Dispatcher
from staal.protocol.mcp.resources import (
    Collection,
    Contents,
    JournalPage,
    ReadResource,
    RecordItem,
    RecordsPage,
    ResourceCatalogue,
    RunItem,
    RunsPage,
)
from staal.protocol.mcp.revisions import LEGACY, MODERN
from tests.protocol.http.test_endpoint import SETTINGS, answered, body, code_of, head, modern_headers
from tests.protocol.test_fuzz import FUZZ, check_answer, json_values
from tests.protocol.test_support import (
    SERVER,
    error_code,
    feed,
    initialize,
    legacy,
    modern,
    result_of,
    sent,
)

KEY = bytes(range(32))
RUN = "0123456789abcdef0123456789abcdef"
BASE = "staal://shop-actions"


def catalogue(key: bytes = KEY) -> ResourceCatalogue:
    return ResourceCatalogue("shop-actions", [Collection("orders", "Orders.", 100)],
                             CursorSigner(key))


def connection() -> Connection:
    return Connection(SERVER, [], resources=catalogue())


def ref(uri: str):
    return catalogue().reference(uri)


# -- what a URI refers to ---------------------------------------------------------------


def test_each_template_refers_to_what_it_names_with_limit_50_by_default():
    assert ref(f"{BASE}/runs") == RunsPage(50)
    assert ref(f"{BASE}/runs?limit=7") == RunsPage(7)
    assert ref(f"{BASE}/runs/{RUN}") == RunItem(RUN)
    assert ref(f"{BASE}/runs/{RUN}/journal") == JournalPage(RUN)
    assert ref(f"{BASE}/orders") == RecordsPage("orders", 50)
    assert ref(f"{BASE}/orders/o%2F1") == RecordItem("orders", "o/1")  # ids are percent-decoded


def test_a_limit_is_clamped_at_200_or_the_collections_max_page_size_never_refused():
    assert ref(f"{BASE}/runs?limit=1000") == RunsPage(200)
    assert ref(f"{BASE}/orders?limit=1000") == RecordsPage("orders", 100)
    assert ref(f"{BASE}/orders?limit=99999999999999999999") == RecordsPage("orders", 100)


@pytest.mark.parametrize(("uri", "says"), [
    (f"{BASE}/orders?limit=0", "limit"), (f"{BASE}/orders?limit=-1", "limit"),
    (f"{BASE}/orders?limit=ten", "limit"), (f"{BASE}/orders?colour=red", "colour"),
    (f"{BASE}/orders/o1?limit=5", "takes no query"), (f"{BASE}/orders?limit=1&limit=2", "twice"),
    (f"{BASE}/runs/not-a-run", "not a run id"), (f"{BASE}/runs/{RUN}/log", "journal"),
    (f"{BASE}/customers", "no collection"), ("staal://other/runs", "staal://shop-actions/"),
    (f"{BASE}/runs#top", "fragment"), (f"{BASE}/orders/", "an id"),
    (f"{BASE}/orders?cursor=nonsense", "cursor"),
])
def test_a_uri_that_names_nothing_served_is_invalid_params_naming_the_part(uri, says):
    error = ref(uri)
    assert error.code == -32602 and says in error.message and error.data == {"uri": uri}


def test_a_cursor_continues_only_the_collection_it_was_made_for():
    page = RecordsPage("orders", 50)
    cursor = catalogue().next_cursor(page, "o0049")
    assert ref(f"{BASE}/orders?cursor={cursor}&limit=50") == RecordsPage("orders", 50, "o0049")
    assert ref(f"{BASE}/runs?cursor={cursor}").code == -32602  # another collection's
    other_key = catalogue(bytes(32)).next_cursor(page, "o0049")
    assert ref(f"{BASE}/orders?cursor={other_key}").code == -32602  # another server's


def test_a_cursor_with_any_one_character_changed_is_refused():
    signer = CursorSigner(KEY)
    cursor = signer.make("orders", "o0049")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    for i, char in enumerate(cursor):
        for other in alphabet.replace(char, "")[:: 7]:
            assert signer.read("orders", cursor[:i] + other + cursor[i + 1:]) is None
    assert signer.read("orders", cursor + "=") is None
    assert signer.read("orders", cursor[:-1]) is None
    assert signer.read("orders", cursor) == "o0049"


def test_a_cursor_forged_from_an_id_without_the_servers_key_is_refused():
    forged = base64.urlsafe_b64encode(b"o0049" + bytes(32)).rstrip(b"=").decode()
    assert CursorSigner(KEY).read("orders", forged) is None


def test_garbage_uris_and_cursors_only_ever_yield_invalid_params():
    rng = random.Random(16)
    pieces = ["staal://", "shop-actions", "/", "runs", "orders", "?", "&", "=", "limit", "cursor",
              "%", "%ff", "#", "\x00", "é", RUN, "journal", "[", "::", " ", "-1", "9" * 30]
    for _ in range(3000):
        uri = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 9)))
        answer = ref(uri)
        assert isinstance(answer, (RunsPage, RunItem, JournalPage, RecordItem, RecordsPage)) or \
            answer.code == -32602, uri
    for value in (None, 5, [], {}, "x" * 5000):
        assert ref(value).code == -32602


# -- the methods, in each revision -------------------------------------------------------


def test_initialize_and_discover_announce_resources_only_when_served():
    conn = connection()
    legacy_result = result_of(sent(conn, initialize()), "initialize", LEGACY)
    assert legacy_result["capabilities"]["resources"] == {"subscribe": False,
                                                          "listChanged": False}
    discovered = result_of(sent(conn, modern(1, "server/discover")), "server/discover", MODERN)
    assert "resources" in discovered["capabilities"]
    plain = Connection(SERVER, [])
    assert "resources" not in sent(plain, initialize())["result"]["capabilities"]
    assert error_code(sent(plain, legacy(2, "resources/list"))) == -32601


@pytest.mark.parametrize("method", ["resources/list", "resources/templates/list"])
def test_the_listings_carry_the_caching_fields_only_in_2026_07_28(method):
    conn = connection()
    sent(conn, initialize())
    old = result_of(sent(conn, legacy(1, method)), method, LEGACY)
    new = result_of(sent(conn, modern(2, method)), method, MODERN)
    assert "ttlMs" not in old and "resultType" not in old
    assert (new["ttlMs"], new["cacheScope"], new["resultType"]) == (0, "private", "complete")
    key = "resources" if method == "resources/list" else "resourceTemplates"
    assert old[key] == new[key] and len(new[key]) == (2 if key == "resources" else 5)
    assert error_code(sent(conn, modern(3, method, {"cursor": "x"}))) == -32602


def test_a_read_goes_to_the_application_and_its_answer_is_written_in_its_revision():
    conn = connection()
    sent(conn, initialize())
    (read,) = feed(conn, modern(1, "resources/read", {"uri": f"{BASE}/runs/{RUN}"}))
    assert isinstance(read, ReadResource) and read.ref == RunItem(RUN)
    message = conn.answer_read(read, Contents({"run": RUN, "status": "done"}, 5000))
    result = result_of(message, "resources/read", MODERN)
    assert (result["ttlMs"], result["cacheScope"]) == (5000, "private")
    (content,) = result["contents"]
    assert content["uri"] == read.uri and content["mimeType"] == "application/json"
    (old,) = feed(conn, legacy(2, "resources/read", {"uri": f"{BASE}/runs"}))
    written = result_of(conn.answer_read(old, Contents({"items": []})), "resources/read", LEGACY)
    assert "ttlMs" not in written and written["contents"][0]["text"] == '{"items":[]}'


def test_an_unknown_resource_is_answered_at_once_as_invalid_params_with_its_uri():
    conn = connection()
    sent(conn, initialize())
    for message in (legacy(1, "resources/read", {"uri": f"{BASE}/nothing"}),
                    modern(2, "resources/read", {"uri": f"{BASE}/nothing"}),
                    legacy(3, "resources/read", {})):
        (event,) = feed(conn, message)
        assert isinstance(event, Send) and error_code(event.message) == -32602
    assert event.message["error"]["data"] == {"uri": None}


def test_a_cancelled_read_gets_no_answer():
    conn = connection()
    sent(conn, initialize())
    (read,) = feed(conn, legacy(7, "resources/read", {"uri": f"{BASE}/orders"}))
    feed(conn, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 7}})
    assert conn.answer_read(read, Contents({"items": []})) is None
    assert conn.in_flight() == []


# -- over Streamable HTTP, sans I/O -------------------------------------------------------


def http_endpoint():
    return Endpoint(Dispatcher(SERVER, [], resources=catalogue()), SETTINGS)


@pytest.mark.parametrize("name", [None, f"{BASE}/orders", "=?base64?not base64?="])
def test_over_http_mcp_name_must_carry_the_uri_being_read(name):
    params = {"uri": f"{BASE}/runs"}
    reply = http_endpoint().message(head(**modern_headers("resources/read", name)),
                                    body("resources/read", params))
    assert code_of(reply) == (400, HEADER_MISMATCH)


@pytest.mark.parametrize("name", [f"{BASE}/runs", f"  {BASE}/runs ",
                                  "=?base64?" + base64.b64encode(f"{BASE}/runs".encode()).decode()
                                  + "?="])
def test_over_http_a_read_named_in_mcp_name_goes_to_the_application_and_is_answered_as_json(name):
    endpoint = http_endpoint()
    reply = endpoint.message(head(**modern_headers("resources/read", name)),
                             body("resources/read", {"uri": f"{BASE}/runs"}))
    assert isinstance(reply, Read) and reply.read.ref == RunsPage(50)
    status, message = answered(endpoint.read_response(reply.read, Contents({"items": []})))
    assert status == 200 and result_of(message, "resources/read", MODERN)["ttlMs"] == 0


def test_over_http_an_unknown_resource_is_400_invalid_params_in_2026_and_200_in_2025():
    endpoint = http_endpoint()
    uri = f"{BASE}/nothing"
    modern_reply = endpoint.message(head(**modern_headers("resources/read", uri)),
                                    body("resources/read", {"uri": uri}))
    status, message = answered(modern_reply)
    assert status == 400 and message["error"]["code"] == -32602
    assert message["error"]["data"] == {"uri": uri}
    legacy_reply = endpoint.message(head(mcp_protocol_version=LEGACY),
                                    body("resources/read", {"uri": uri}, envelope=False))
    status, message = answered(legacy_reply)
    assert status == 200 and message["error"]["code"] == -32602


# -- fuzzed ------------------------------------------------------------------------------

URI_PIECES = st.sampled_from([BASE, "staal://", "/", "runs", "orders", RUN, "journal", "?",
                              "&", "=", "limit", "cursor", "%", "%2F", "#", "é", "-1", "9" * 20])
uris = st.lists(URI_PIECES, max_size=9).map("".join) | json_values


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["resources/read", "resources/list",
                                           "resources/templates/list"]),
                          st.fixed_dictionaries({}, optional={"uri": uris, "cursor": json_values}),
                          st.booleans()), min_size=1, max_size=6))
def test_any_resource_request_gives_a_valid_answer_or_a_read_that_answers_validly(sequence):
    conn = connection()
    sent(conn, initialize())
    for i, (method, params, envelope) in enumerate(sequence):
        message = (modern if envelope else legacy)(i + 1, method, params)
        for event in feed(conn, message):
            if isinstance(event, ReadResource):
                answer = conn.answer_read(event, Contents({"items": []}))
                result_of(answer, method, MODERN if envelope else LEGACY)
            else:
                assert isinstance(event, Send)
                check_answer(event.message)
    assert conn.in_flight() == []
