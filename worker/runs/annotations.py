"""From a program's Python annotations to the type descriptions of
`staal.inputs.types`, which the supervisor checks arguments against.

Supported (DESIGN.md section 3): `str`, `int`, `bool`, `decimal.Decimal`,
`staal.Money`, `list[T]`, `dict[str, T]`, `T | None` (or `Optional[T]`),
`typing.Literal[...]` of strings, whole numbers and booleans,
`typing.TypedDict` records and `staal.Json`. Anything else raises
`UnsupportedType` naming the unsupported part.
"""

from __future__ import annotations

import inspect
import types
import typing
from decimal import Decimal
from typing import (
    Annotated,
    Any,
    ForwardRef,
    Literal,
    NotRequired,
    Required,
    Union,
    get_args,
    get_origin,
)

from staal.caps import Capability
from staal.errors import StaalError
from staal.inputs import arguments
from staal.inputs import types as inputs
from staal.money import Money
from staal.program import JSON_MARKER
from staal.worker.errors import WorkerError

SUPPORTED = ("str, int, bool, decimal.Decimal, staal.Money, list[T], dict[str, T], "
             "T | None, Literal[...], a TypedDict or staal.Json")
_SIMPLE: tuple[tuple[Any, str], ...] = (
    (str, "str"), (bool, "bool"), (int, "int"), (Decimal, "decimal"), (Money, "money"),
)
_ANY_JSON = "use staal.Json for any JSON value"
_ADVICE: tuple[tuple[Any, str], ...] = (
    (float, ("a float cannot hold every decimal exactly; use decimal.Decimal, or staal.Money "
             "for an amount of money")),
    (Any, _ANY_JSON),
    (object, _ANY_JSON),
    (inspect.Parameter.empty, f"every input needs an annotation; {_ANY_JSON}"),
    (bytes, "use str"),
    (type(None), "None alone is not an input type; use T | None"),
    (None, "None alone is not an input type; use T | None"),
)
_SEQUENCES = (tuple, set, frozenset)


class UnsupportedType(WorkerError, TypeError):
    """An annotation staal cannot check arguments against. `part` names the
    unsupported annotation; `message` says why and what to use instead."""

    kind = "unsupported_type"

    def __init__(self, part: str, reason: str, where: str = "") -> None:
        self.part = part
        self.reason = reason
        self.where = where
        self.message = f"{part} is not supported as an input type: {reason}"
        if where and where != part:
            self.message += f" (in {where})"
        super().__init__(self.message)


class BadDefault(WorkerError, ValueError):
    """A parameter's default that does not fit the parameter's type."""

    kind = "bad_default"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def type_name(annotation: Any) -> str:
    """An annotation as a program would write it (`set[int]`, `float`)."""
    if annotation is inspect.Parameter.empty:
        return "(no annotation)"
    if annotation is None or annotation is type(None):
        return "None"
    if annotation is Ellipsis:
        return "..."
    if isinstance(annotation, list):  # the parameters of a Callable
        return f"[{', '.join(type_name(a) for a in annotation)}]"
    if isinstance(annotation, ForwardRef):
        return repr(annotation.__forward_arg__)
    if _is_json(annotation):
        return "staal.Json"
    for known, name in ((Decimal, "decimal.Decimal"), (Money, "staal.Money"), (Any, "Any")):
        if annotation is known:
            return name
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin is Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin is Annotated:
        extras = ", ".join(repr(m) for m in annotation.__metadata__)
        return f"Annotated[{type_name(args[0])}, {extras}]"
    if origin is not None and args:
        return f"{type_name(origin)}[{', '.join(type_name(a) for a in args)}]"
    if isinstance(annotation, type):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def describe(annotation: Any) -> dict[str, Any]:
    """The type description of one input annotation."""
    return _Describer(type_name(annotation)).describe(annotation)


class _Describer:
    def __init__(self, whole: str) -> None:
        self.whole = whole
        self.records: list[Any] = []  # the TypedDicts being described, outermost first
        self.fields: list[str] = []  # the record fields being described, as Record.field

    def refuse(self, annotation: Any, reason: str) -> UnsupportedType:
        where = self.whole
        if self.fields:
            where = f"{self.whole}, field {self.fields[-1]}"
        return UnsupportedType(type_name(annotation), reason, where)

    def describe(self, tp: Any) -> dict[str, Any]:
        for simple, name in _SIMPLE:
            if tp is simple:
                return {"type": name}
        origin = get_origin(tp)
        if _is_json(tp):
            return {"type": "json"}
        if origin is Annotated:
            raise self.refuse(tp, "staal checks no annotation metadata but staal.Json's; "
                                  "use the plain type")
        if origin is list:
            return {"type": "list", "items": self.describe(self.one_arg(tp, "list[str]"))}
        if origin is dict:
            return self.mapping(tp)
        if origin in (Union, types.UnionType):
            return self.optional(tp)
        if origin is Literal:
            return self.literal(tp)
        if typing.is_typeddict(tp):
            return self.record(tp)
        raise self.refuse(tp, self.advice(tp))

    def advice(self, tp: Any) -> str:
        for known, advice in _ADVICE:
            if tp is known:
                return advice
        if isinstance(tp, (str, ForwardRef)):
            return "the annotation is unresolved text; define the type before the program uses it"
        if tp in (list, dict):
            return f"say what it holds, e.g. {tp.__name__}[{'str, ' if tp is dict else ''}str]"
        if tp in _SEQUENCES or get_origin(tp) in _SEQUENCES:
            return "use list[T]"
        if isinstance(tp, type) and issubclass(tp, Capability):
            return "a capability is a parameter of its own, not part of an input"
        return f"supported: {SUPPORTED}"

    def one_arg(self, tp: Any, example: str) -> Any:
        args = get_args(tp)
        if len(args) != 1:
            raise self.refuse(tp, f"say what it holds, e.g. {example}")
        return args[0]

    def mapping(self, tp: Any) -> dict[str, Any]:
        args = get_args(tp)
        if len(args) != 2:
            raise self.refuse(tp, "say what it holds, e.g. dict[str, int]")
        if args[0] is not str:
            raise self.refuse(tp, "JSON object keys are strings: use dict[str, T]")
        return {"type": "dict", "values": self.describe(args[1])}

    def optional(self, tp: Any) -> dict[str, Any]:
        args = get_args(tp)
        others = [a for a in args if a is not type(None)]
        if len(others) != 1 or len(others) == len(args):
            raise self.refuse(tp, "the only union supported is T | None")
        return {"type": "optional", "of": self.describe(others[0])}

    def literal(self, tp: Any) -> dict[str, Any]:
        values = list(get_args(tp))
        for value in values:
            fits = isinstance(value, (str, bool)) or (
                type(value) is int and inputs.INT_MIN <= value <= inputs.INT_MAX)
            if not fits:
                raise self.refuse(tp, f"a literal is a str, an int or a bool, not {value!r}")
        return {"type": "literal", "values": values}

    def record(self, td: Any) -> dict[str, Any]:
        if td in self.records:
            raise self.refuse(td, "a record that contains itself is not supported")
        try:
            hints = typing.get_type_hints(td, include_extras=True)
        except (NameError, TypeError, AttributeError, SyntaxError) as exc:
            raise self.refuse(td, f"its annotations cannot be resolved ({exc})") from None
        required = set(td.__required_keys__)
        fields = {}
        self.records.append(td)
        for key, hint in hints.items():
            hint, marked = _unwrap_required(hint)
            if marked is not None:
                # Explicit marks decide: __required_keys__ misses them when the
                # TypedDict's annotations are strings (from __future__ import).
                (required.add if marked else required.discard)(key)
            self.fields.append(f"{td.__name__}.{key}")
            fields[key] = self.describe(hint)
            self.fields.pop()
        self.records.pop()
        return {"type": "record", "name": td.__name__, "fields": fields,
                "required": [k for k in fields if k in required]}


def _is_json(tp: Any) -> bool:
    if get_origin(tp) is not Annotated:
        return False
    return get_args(tp)[0] is Any and any(m is JSON_MARKER for m in tp.__metadata__)


def _unwrap_required(hint: Any) -> tuple[Any, bool | None]:
    marked = None
    while get_origin(hint) in (Required, NotRequired):
        marked = get_origin(hint) is Required if marked is None else marked
        hint = get_args(hint)[0]
    return hint, marked


def describe_default(type_desc: dict[str, Any], value: Any) -> Any:
    """The JSON form of a parameter's default, checked against its type by
    the runtime's own rules (`Money("35", "USD")` -> its wire form)."""
    try:
        checked = arguments.check_value(type_desc, arguments.value_to_json(value), "default")
    except inputs.InputError as exc:
        raise BadDefault(f"the default {_show_python(value)} does not fit the parameter's type: "
                         + "; ".join(exc.problems)) from None
    except StaalError as exc:  # a default with no JSON form (a NaN decimal)
        raise BadDefault(f"the default {_show_python(value)} has no JSON form ({exc})") from None
    return arguments.value_to_json(checked)


def _show_python(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
