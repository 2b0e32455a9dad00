"""Compares the package's TypedDicts with JSON Schemas of the API's OpenAPI document.

``drift(cls, schema)`` lists every difference: a field only on one side, a field required on one
side and optional on the other, a type that does not match (str/int/float/bool, Optional as
``anyOf [.., null]`` or ``type: [.., "null"]``, Literal as const/enum, List as array, a nested
TypedDict as an object, compared recursively). ``request=True`` is for bodies the package sends:
its fields must be a subset of the schema's, with the same types.
"""

from __future__ import annotations

import types
from typing import Any, Dict, List, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

JSON = Dict[str, Any]


def _variants(schema: JSON) -> List[JSON]:
    """A schema as the list of its alternatives (anyOf/oneOf, or a list of types)."""
    for key in ("anyOf", "oneOf"):
        if key in schema:
            out: List[JSON] = []
            for option in schema[key]:
                out.extend(_variants(option))
            return out
    kind = schema.get("type")
    if isinstance(kind, list):
        return [{**schema, "type": k} for k in kind]
    return [schema]


def _literal_of(variant: JSON) -> List[Any]:
    if "const" in variant:
        return [variant["const"]]
    if "enum" in variant:
        return list(variant["enum"])
    return []


def _type_drift(where: str, hint: Any, schema: JSON) -> List[str]:
    origin = get_origin(hint)
    variants = _variants(schema)
    if origin is Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        members = get_args(hint)
        wants_null = type(None) in members
        has_null = any(v.get("type") == "null" for v in variants)
        problems = [] if wants_null == has_null else [f"{where}: null is {'allowed' if has_null else 'not allowed'} by the API"]
        rest = [m for m in members if m is not type(None)]
        others = {**schema}
        others.pop("anyOf", None)
        non_null = [v for v in variants if v.get("type") != "null"]
        target = rest[0] if len(rest) == 1 else Union[tuple(rest)]  # type: ignore[arg-type]
        return problems + _type_drift(where, target, non_null[0] if len(non_null) == 1 else {"anyOf": non_null})
    if any(v.get("type") == "null" for v in variants):
        return [f"{where}: the API allows null, the type does not"]
    if origin is Literal:
        values = sorted(map(repr, get_args(hint)))
        listed = sorted(repr(x) for v in variants for x in _literal_of(v))
        return [] if values == listed else [f"{where}: values {values} against the API's {listed}"]
    if is_typeddict(hint):
        objects = [v for v in variants if v.get("type") == "object"]
        return drift(hint, objects[0], where) if objects else [f"{where}: the API's value is not an object"]
    if origin in (dict, Dict):
        objects = [v for v in variants if v.get("type") == "object"]
        if not objects:
            return [f"{where}: the API's value is not an object"]
        return _type_drift(f"{where}{{}}", get_args(hint)[1], objects[0].get("additionalProperties", {}))
    if origin in (list, List):
        arrays = [v for v in variants if v.get("type") == "array"]
        if not arrays:
            return [f"{where}: the API's value is not an array"]
        return _type_drift(f"{where}[]", get_args(hint)[0], arrays[0].get("items", {}))
    expected = {str: "string", int: "integer", float: "number", bool: "boolean"}.get(hint)
    if expected is None:
        return [f"{where}: no JSON type for {hint!r}"]
    kinds = {v.get("type") for v in variants}
    if expected in kinds or (expected == "number" and "integer" in kinds):
        return []
    return [f"{where}: {expected} against the API's {sorted(map(str, kinds))}"]


def drift(cls: Any, schema: JSON, where: str = "", request: bool = False) -> List[str]:
    where = where or cls.__name__
    if schema.get("type") != "object":
        return [f"{where}: the API's schema is not an object"]
    hints = get_type_hints(cls)
    properties: JSON = schema.get("properties", {})
    required = set(schema.get("required", []))
    problems: List[str] = []
    for name in sorted(set(hints) - set(properties)):
        problems.append(f"{where}.{name}: not in the API's schema")
    if not request:
        for name in sorted(set(properties) - set(hints)):
            problems.append(f"{where}.{name}: in the API's schema, not in the type")
    for name in sorted(set(hints) & set(properties)):
        is_required = name in cls.__required_keys__
        if not request and is_required != (name in required):
            problems.append(f"{where}.{name}: required {is_required} in the type, {name in required} in the API")
        problems.extend(_type_drift(f"{where}.{name}", hints[name], properties[name]))
    return problems
