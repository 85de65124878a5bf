"""tools/list: every manifest tool in order, then staal_run_status, each with
annotations derived from its grants (seed 000 sections 4 and 5; DESIGN.md
section 9, "Annotations": one test per rule)."""

from __future__ import annotations

from dataclasses import replace

import mcp_types
import pytest

from staal.manifest.model import RUN_STATUS_TOOL
from staal.protocol.mcp.revisions import LEGACY, MODERN
from staal.protocol.mcp.tools import (
    RUN_STATUS_INPUT_SCHEMA,
    Annotations,
    ToolDescriptor,
    annotations_for,
    describe_tool,
    run_status_descriptor,
)
from tests.helpers.manifests import STRIPE_GRANT
from tests.protocol.test_support import (
    SCHEMA,
    connection,
    descriptor,
    initialized,
    legacy,
    manifest_tool,
    modern,
    result_of,
    sent,
)

GET = {"cap": "net.http.get", "only": ["https://shop.example/orders/*"]}
POST = {"cap": "net.http.post", "only": ["https://shop.example/tickets"]}
SQLITE_READ = {"cap": "db.sqlite.read", "path": "shop.db"}
SQLITE_WRITE = {"cap": "db.sqlite.write", "path": "shop.db"}


def hints(tmp_path, grants, **options) -> Annotations:
    return annotations_for(manifest_tool(tmp_path, grants, **options))


def as_flags(annotations: Annotations) -> tuple[bool, bool, bool, bool]:
    """(readOnly, destructive, idempotent, openWorld)"""
    return (annotations.read_only, annotations.destructive, annotations.idempotent,
            annotations.open_world)


# -- annotations, one test per rule -----------------------------------


def test_a_tool_with_no_grants_is_read_only_not_destructive_idempotent_and_closed_world(tmp_path):
    assert as_flags(hints(tmp_path, {})) == (True, False, True, False)


def test_a_tool_with_only_reads_is_read_only_and_idempotent_and_closed_world_off_the_network(
        tmp_path):
    grants = {"db": SQLITE_READ, "clock": {"cap": "clock.now"}, "rand": {"cap": "random.bytes"}}
    assert as_flags(hints(tmp_path, grants)) == (True, False, True, False)


def test_a_tool_with_network_reads_only_is_read_only_idempotent_and_open_world(tmp_path):
    assert as_flags(hints(tmp_path, {"get": GET})) == (True, False, True, True)
    assert as_flags(hints(tmp_path, {"model": {"cap": "model.complete"}})) == (True, False, True, True)


def test_a_tool_with_reads_and_a_write_is_destructive_and_not_idempotent_without_once(tmp_path):
    assert as_flags(hints(tmp_path, {"db": SQLITE_READ, "out": SQLITE_WRITE})) == \
        (False, True, False, False)
    assert as_flags(hints(tmp_path, {"get": GET, "post": POST})) == (False, True, False, True)


def test_a_tool_with_a_write_and_once_is_idempotent(tmp_path):
    assert as_flags(hints(tmp_path, {"out": SQLITE_WRITE}, once=True)) == (False, True, True, False)


def test_idempotency_key_alone_does_not_make_a_tool_idempotent(tmp_path):
    keyed = {**POST, "idempotency_key": True}
    assert hints(tmp_path, {"post": keyed}).idempotent is False
    assert hints(tmp_path, {"pay": STRIPE_GRANT}).idempotent is False
    assert hints(tmp_path, {"pay": STRIPE_GRANT}, once=True).idempotent is True


def test_a_narrowed_capability_is_annotated_by_its_capabilitys_nature(tmp_path):
    narrow_get = {"cap": "net.http.get", "only": ["https://shop.example/orders/1"], "uses": 1}
    assert as_flags(hints(tmp_path, {"get": narrow_get})) == (True, False, True, True)
    narrow_post = {**POST, "uses": 1}
    assert as_flags(hints(tmp_path, {"post": narrow_post})) == (False, True, False, True)
    tiny_refund = {**STRIPE_GRANT, "each": {"amount": "0.01", "currency": "USD"}, "uses": 1}
    assert as_flags(hints(tmp_path, {"pay": tiny_refund})) == (False, True, False, True)


def test_the_grants_a_composite_acts_through_count(tmp_path):
    tool = manifest_tool(tmp_path, {"pay": STRIPE_GRANT})
    assert [grant.cap for grant in tool.all_grants()] == [
        "payments.stripe.refund", "net.http.get", "net.http.post"]
    assert as_flags(annotations_for(tool)) == (False, True, False, True)


def test_the_title_annotation_is_the_tools_title(tmp_path):
    assert hints(tmp_path, {}).title == "Refund an order"
    assert hints(tmp_path, {}, title=None).title is None


# -- descriptors --------------------------------------------------------


def test_a_descriptor_holds_the_manifest_tools_name_title_description_and_schema(tmp_path):
    tool = manifest_tool(tmp_path, {"get": GET})
    described = describe_tool(tool, SCHEMA)
    assert described.to_wire() == {
        "name": "refund_order",
        "title": "Refund an order",
        "description": tool.description,
        "inputSchema": SCHEMA,
        "annotations": {"title": "Refund an order", "readOnlyHint": True,
                        "destructiveHint": False, "idempotentHint": True, "openWorldHint": True},
    }


def test_a_tool_without_a_title_has_no_title_field(tmp_path):
    wire = descriptor(tmp_path, title=None).to_wire()
    assert "title" not in wire and "title" not in wire["annotations"]


def test_the_input_schema_is_the_tools_own_copy(tmp_path):
    schema = {"type": "object", "properties": {"order": {"type": "string"}}}
    described = describe_tool(manifest_tool(tmp_path, {}), schema)
    schema["properties"]["order"]["type"] = "integer"
    assert described.input_schema["properties"]["order"]["type"] == "string"


@pytest.mark.parametrize("schema", [{}, {"type": "array"}, [], {"type": "object", "x": {1, 2}}],
                         ids=["empty", "array", "list", "unserializable"])
def test_an_input_schema_that_is_not_an_object_schema_is_refused(tmp_path, schema):
    with pytest.raises((ValueError, TypeError)) as caught:
        describe_tool(manifest_tool(tmp_path, {}), schema)
    assert str(caught.value) in (
        "the input schema of tool 'refund_order' must be a JSON object schema",
        "Type is not JSON serializable: set")  # the unserializable one, found as it is encoded


def test_staal_run_status_is_read_only_and_takes_a_run_id():
    status = run_status_descriptor()
    assert status.name == RUN_STATUS_TOOL
    assert as_flags(status.annotations) == (True, False, True, False)
    assert status.input_schema == RUN_STATUS_INPUT_SCHEMA
    assert status.input_schema["properties"]["run"]["pattern"] == "^[0-9a-f]{32}$"
    assert status.input_schema["required"] == ["run"]


def test_a_manifest_tool_may_not_take_staal_run_status_s_name(tmp_path):
    clash = replace(descriptor(tmp_path), name=RUN_STATUS_TOOL)
    with pytest.raises(ValueError, match=r"^tool names must be unique: staal_run_status$"):
        connection([clash])


def test_tool_names_must_be_unique(tmp_path):
    with pytest.raises(ValueError, match=r"^tool names must be unique: refund_order$"):
        connection([descriptor(tmp_path), descriptor(tmp_path)])


# -- the listing ---------------------------------------------------------


def named(tmp_path, name: str, grants: dict) -> ToolDescriptor:
    directory = tmp_path / name
    directory.mkdir()
    return describe_tool(replace(manifest_tool(directory, grants), name=name), SCHEMA)


REVISIONS = pytest.mark.parametrize(("make", "revision"), [(legacy, LEGACY), (modern, MODERN)],
                                    ids=[LEGACY, MODERN])


@REVISIONS
def test_tools_list_gives_the_manifest_tools_in_order_then_staal_run_status(
        tmp_path, make, revision):
    names = ["zeta", "alpha", "refund_order", "mid"]
    conn = initialized([named(tmp_path, name, {}) for name in names])
    result = result_of(sent(conn, make(1, "tools/list")), "tools/list", revision)
    assert [tool["name"] for tool in result["tools"]] == [*names, RUN_STATUS_TOOL]


@REVISIONS
def test_every_listed_tool_is_one_the_sdk_accepts_with_its_annotations(tmp_path, make, revision):
    tools = [named(tmp_path, "refund", {"pay": STRIPE_GRANT}), named(tmp_path, "look", {"get": GET})]
    conn = initialized(tools)
    result = result_of(sent(conn, make(1, "tools/list")), "tools/list", revision)
    listed = mcp_types.ListToolsResult.model_validate(result).tools
    assert [tool.annotations.destructive_hint for tool in listed] == [True, False, False]
    assert [tool.annotations.open_world_hint for tool in listed] == [True, True, False]
    assert all(tool.input_schema["type"] == "object" for tool in listed)
    assert listed[0].title == "Refund an order"
