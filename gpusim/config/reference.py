"""The keys a hardware description can have, read from its pydantic models: for ``gpusim hw keys``,
the reference an architect writes a new description against."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from gpusim.config.hardware import DESCRIPTION_CLASSES
from gpusim.units import key_unit

_COUNTS = (("_flop_per_cycle", "FLOP per cycle"), ("_bytes_per_cycle", "bytes per cycle"),
           ("_fraction", "fraction"), ("_cycles", "cycles"))
"""Keys that count something other than an SI quantity, by the part of their name that says what."""


def _unit(name: str) -> str | None:
    si = key_unit(name)
    if si is not None:
        return f"{si[0]} (a number with a unit, e.g. {si[1]})"
    return next((what for part, what in _COUNTS if part in name), None)


@dataclass(frozen=True)
class KeyInfo:
    path: str
    kind: str
    """What the value is: a quantity and its unit, a whole number, a choice, a mapping of keys."""
    required: bool
    """Required where its mapping is given (a key of an optional mapping is needed only with it)."""
    default: Any
    """The value used when the key is left out (None: the feature is absent or derived)."""
    doc: str


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """(the value's type, whether None is allowed), ``Optional`` and ``Annotated`` wrappers removed."""
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            annotation, optional = args[0], True
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation, optional


def _kind(name: str, annotation: Any, parent: str = "") -> str:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(annotation))
    if origin in (dict, typing.Dict):
        return "mapping of name to text" if typing.get_args(annotation)[-1] is str else "mapping"
    if origin in (tuple, list):
        return "list"
    if annotation is bool:
        return "true or false"
    if annotation is str:
        return "text"
    if annotation is int:
        return "whole number"
    # a per-dtype table (fp16: ..., bf16: ...) takes the unit its own key names
    return _unit(name) or _unit(parent) or "number"


def _first_sentence(text: str | None) -> str:
    if not text:
        return ""
    flat = " ".join(text.split())
    end = flat.find(". ")
    return flat if end < 0 else flat[: end + 1]


def key_rows(kind: str) -> list[KeyInfo]:
    """Every key of a ``kind`` (gpu, cpu, system) description, depth first, in declaration order."""
    rows: list[KeyInfo] = []

    def walk(model: type[BaseModel], prefix: str, parent: str) -> None:
        for name, field in model.model_fields.items():
            annotation, _ = _unwrap_optional(field.annotation)
            default = None if field.default is PydanticUndefined else field.default
            path = f"{prefix}{name}"
            value_kind = _kind(name, annotation, parent)
            rows.append(KeyInfo(path, value_kind, field.is_required(), default, _first_sentence(field.description)))
            if value_kind == "mapping" and isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, path + ".", name)

    walk(DESCRIPTION_CLASSES[kind], "", "")
    return rows
