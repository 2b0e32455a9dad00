"""The drift check itself (the e2e suite runs it on the document the API serves): it finds a
missing field, a renamed one, a required-ness and a type that differ."""

from __future__ import annotations

from typing import Dict, List, Literal, Optional, TypedDict

from ..contract import drift

SCHEMA = {
    "type": "object",
    "properties": {
        "user_id": {"type": "string"},
        "voted": {"anyOf": [{"type": "number", "const": 0}, {"type": "number", "const": 1}]},
        "at": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "items": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}},
    },
    "required": ["user_id", "voted", "at", "items"],
}


class Item(TypedDict):
    n: int


class Same(TypedDict):
    user_id: str
    voted: Literal[0, 1]
    at: Optional[str]
    items: List[Item]


class _Base(TypedDict):
    userId: str
    voted: Literal[0, 1, 2]
    at: str


class Drifted(_Base, total=False):
    items: List[int]


def test_a_matching_type_has_no_drift() -> None:
    assert drift(Same, SCHEMA) == []


def test_every_kind_of_drift_is_found() -> None:
    problems = drift(Drifted, SCHEMA)
    assert "Drifted.userId: not in the API's schema" in problems
    assert "Drifted.user_id: in the API's schema, not in the type" in problems
    assert any(p.startswith("Drifted.voted: values") for p in problems)
    assert "Drifted.at: the API allows null, the type does not" in problems
    assert "Drifted.items: required False in the type, True in the API" in problems
    assert any(p.startswith("Drifted.items[]: integer against") for p in problems)


MAP_SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "object", "additionalProperties": {"type": "string"}}},
}


class _Map(TypedDict, total=False):
    query: Dict[str, str]


class _IntMap(TypedDict, total=False):
    query: Dict[str, int]


def test_a_map_is_compared_by_its_values() -> None:
    assert drift(_Map, MAP_SCHEMA) == []
    assert drift(_IntMap, MAP_SCHEMA) == ["_IntMap.query{}: integer against the API's ['string']"]
