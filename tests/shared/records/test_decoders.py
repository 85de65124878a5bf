"""A decoder per type, made once: the same checks as walking the type
hints for every value, each problem naming its field path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

import pytest

from staal.errors import RecordError
from staal.records.decoders import dataclass_decoder, decoder
from staal.records.record import AtLeast, Pattern


@dataclass(frozen=True)
class Node:
    name: Annotated[str, Pattern(r"[a-z]+", "a lower-case name")]
    children: tuple[Node, ...] = field(default_factory=tuple)
    kind: Literal["leaf", "branch"] = "leaf"
    weight: Annotated[int, AtLeast(0)] | None = None


def test_a_dataclass_that_holds_itself_decodes_to_any_depth():
    data = {"name": "root", "kind": "branch",
            "children": [{"name": "a", "children": [{"name": "b", "weight": 2}]}]}
    node = dataclass_decoder(Node)(data, "")
    assert node == Node("root", (Node("a", (Node("b", weight=2),)),), "branch")


@pytest.mark.parametrize(("data", "path", "message"), [
    ({"name": "root", "children": [{"name": "a", "children": [{"name": "B"}]}]},
     "children[0].children[0].name", "expected a lower-case name, not 'B'"),
    ({"name": "root", "children": [{"name": "a", "weight": -1}]},
     "children[0].weight", "expected at least 0, not -1"),
    ({"name": "root", "kind": "tree"}, "kind", "expected one of 'leaf', 'branch', not 'tree'"),
    ({"name": "root", "children": [{"nom": "a"}]}, "children[0].nom", "unknown field"),
    ({"children": []}, "name", "is required"),
    ({"name": 3}, "name", "expected str, not a number"),
    ({"name": "a", "weight": True}, "weight", "expected int, not true/false"),
    ({"name": "a", "children": {}}, "children", "expected a list, not an object"),
])
def test_a_value_that_is_not_of_its_type_is_refused_naming_its_path(data, path, message):
    with pytest.raises(RecordError) as raised:
        dataclass_decoder(Node)(data, "")
    assert (raised.value.path, raised.value.reason) == (path, message)


def test_a_decoder_is_made_once_per_type():
    assert decoder(tuple[Node, ...]) is decoder(tuple[Node, ...])
    assert dataclass_decoder(Node) is dataclass_decoder(Node)
