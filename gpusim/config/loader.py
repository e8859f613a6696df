"""Reading YAML descriptions: safe loading, ``extends:`` overlays, ``--set`` overrides, one-line errors.

These helpers are shared by hardware and workload descriptions. Everything that goes wrong becomes a
:class:`~gpusim.errors.ConfigError` naming the file and the key path.
"""

from __future__ import annotations

import copy
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml
from pydantic import BaseModel, ValidationError

from gpusim.config.types import FIELD_MARK
from gpusim.errors import ConfigError, KeyPathError
from gpusim.units import key_unit

SET_SOURCE = "--set"


# ------------------------------------------------------------------------------------ reading


def read_text_file(path: Path | str, source: str | None = None) -> str:
    """A UTF-8 text file's contents (a leading byte-order mark dropped); every failure is a ConfigError
    naming ``source`` (default: the path)."""
    path = Path(path)
    source = source or str(path)
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(source, "", "file not found") from None
    except IsADirectoryError:
        raise ConfigError(source, "", "is a directory, not a file") from None
    except UnicodeDecodeError:
        raise ConfigError(source, "", "not a UTF-8 text file") from None
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read: {exc.strerror}") from None


def read_yaml(path: Path | str) -> dict[str, Any]:
    """Load one YAML file as a mapping with ``yaml.safe_load``; every failure is a ConfigError."""
    return parse_yaml(read_text_file(path), str(path))


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int) -> None:
        super().__init__(key, line)
        self.key, self.line = key, line


MAX_YAML_DEPTH = 100
"""Deepest nesting of mappings and lists a description may have (the built-in ones use fewer than 10)."""
MAX_YAML_NODES = 1_000_000
"""Most values a description may hold once its aliases (``*name``) are expanded: a file of a few lines
whose aliases nest ("billion laughs") would otherwise expand to more than memory holds."""


def _check_expanded_size(root, source: str) -> None:
    """Refuse a document nested deeper than MAX_YAML_DEPTH or holding more than MAX_YAML_NODES values
    with every alias counted where it is used. Each node's expanded size is computed once (an alias
    is the same node object as its anchor), so the check takes time linear in the file."""
    sizes: dict[int, int] = {}

    def size(node, depth: int) -> int:
        if depth > MAX_YAML_DEPTH:
            raise RecursionError
        known = sizes.get(id(node))
        if known is not None:
            return known
        if isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        total = 1 + sum(size(child, depth + 1) for child in children)
        if total > MAX_YAML_NODES:
            raise ConfigError(source, "", f"holds more than {MAX_YAML_NODES:,} values once its aliases are "
                                          "expanded (nested aliases?)")
        sizes[id(node)] = total
        return total

    size(root, 0)


def _check_duplicate_keys(root: yaml.Node) -> None:
    """Raise :class:`_DuplicateKey` with the dotted path of the first key written twice in one mapping
    (plain YAML keeps the last silently, so a pasted second ``m:`` would win unnoticed)."""
    seen_nodes: set[int] = set()

    def walk(node: yaml.Node, path: str) -> None:
        if id(node) in seen_nodes:  # an alias: its keys were checked where it was defined
            return
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                where = f"{path}.{key}" if path else str(key)
                if key is not None:
                    if key in keys and key != "<<":
                        raise _DuplicateKey(where, key_node.start_mark.line + 1)
                    keys.add(key)
                walk(value_node, where)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, f"{path}.{i}" if path else str(i))

    walk(root, "")


def parse_yaml(text: str, source: str) -> dict[str, Any]:
    if not text.strip():
        raise ConfigError(source, "", "file is empty")
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                _check_expanded_size(node, source)
                _check_duplicate_keys(node)
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except RecursionError:
        raise ConfigError(source, "", f"YAML nested more than {MAX_YAML_DEPTH} levels deep") from None
    except _DuplicateKey as exc:
        raise ConfigError(source, str(exc.key), f"line {exc.line}: key written twice in one mapping") from None
    except yaml.constructor.ConstructorError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else "?"
        quoted = re.search(r"'([^']*)'", exc.problem or "")
        tag = quoted.group(1) if quoted else "?"
        raise ConfigError(source, "", f"line {line}: YAML tag {tag!r} is not allowed (plain data only)") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ConfigError(source, "", f"YAML syntax error at {where}{problem}") from None
    if data is None:
        raise ConfigError(source, "", "file is empty")
    if not isinstance(data, dict):
        raise ConfigError(source, "", f"top level must be a mapping of keys, got {type(data).__name__}")
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(source, str(key), "keys must be text")
    return data


def deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Overlay wins; mappings merge recursively; ``null`` in the overlay removes the key."""
    out = copy.deepcopy(dict(base))
    for key, value in overlay.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# ------------------------------------------------------------------------------------ --set


def parse_set_items(items: Iterable[str]) -> list[tuple[str, Any]]:
    """Parse ``KEY.PATH=VALUE`` strings; VALUE is read as a YAML scalar (``128``, ``3.35 TB/s``, ``true``)."""
    out: list[tuple[str, Any]] = []
    for item in items:
        if "=" not in item:
            raise ConfigError(SET_SOURCE, item, "expected KEY.PATH=VALUE")
        key, _, raw = item.partition("=")
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(SET_SOURCE, key or item, "empty key path")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        if isinstance(value, (dict, list)):
            raise ConfigError(SET_SOURCE, key, "value must be a single number, quantity or word")
        out.append((key, value))
    return out


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(dict(data))
    for key, value in overrides:
        parts = key.split(".")
        node: Any = out
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(SET_SOURCE, ".".join(parts[: depth + 1]), "is a value, not a section")
            node = child
        node[parts[-1]] = value
    return out


# ------------------------------------------------------------------------------------ validation


def _unwrap(annotation: Any) -> list[Any]:
    """The model classes an annotation can hold (through Optional, Annotated, dict values, lists)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [c for arg in typing.get_args(annotation) for c in _unwrap(arg)]
    if origin in (list, tuple, dict):
        args = typing.get_args(annotation)
        return _unwrap(args[-1]) if args else []
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return []


def _field_names_at(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    classes: list[Any] = [model]
    for part in loc:
        if isinstance(part, int):
            continue
        nxt: list[Any] = []
        for cls in classes:
            field = cls.model_fields.get(part)
            if field is not None:
                nxt.extend(_unwrap(field.annotation))
        if not nxt:
            # a tagged union member name (e.g. op kind) rather than a field
            nxt = [c for c in classes]
            continue
        classes = nxt
    names: list[str] = []
    for cls in classes:
        names.extend(n for n in cls.model_fields if n not in names)
    return names


def _describe_input(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def validation_message(model: type[BaseModel], error: Mapping[str, Any]) -> tuple[str, str]:
    """(key path, message) for one pydantic error dict."""
    loc = [p for p in error["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
    kind = error["type"]
    msg = str(error.get("msg", ""))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if msg.startswith("Assertion failed, "):
        msg = msg[len("Assertion failed, "):]
    if msg.startswith(FIELD_MARK):
        field, _, msg = msg[len(FIELD_MARK):].partition("|")
        loc = loc + [field]
    path = ".".join(str(p) for p in loc)
    if kind == "extra_forbidden":
        names = _field_names_at(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else (f"; expected one of: {', '.join(names)}" if names else "")
        return path, f"unknown key{hint}"
    if kind == "missing":
        return path, "missing required key"
    if kind in ("literal_error", "enum"):
        return path, f"{msg[0].lower() + msg[1:]} (got {_describe_input(error.get('input'))})"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        given = error.get("input")
        unit_note = " in SI units" if isinstance(given, str) else ""
        hint = ""
        unit = key_unit(str(loc[-1])) if loc else None
        if unit and kind.startswith("greater") and isinstance(given, (int, float)) and not isinstance(given, bool):
            hint = f"; a bare number is in {unit[0]}: write the unit, e.g. {unit[1]}"
        return path, f"{msg[0].lower() + msg[1:]}{unit_note} (got {_describe_input(given)}){hint}"
    if kind in ("model_type", "dict_type"):
        return path, f"expected a mapping of keys, got {_describe_input(error.get('input'))}"
    if kind in ("int_type", "int_parsing", "int_from_float", "float_type", "float_parsing", "bool_type",
                "bool_parsing", "string_type", "list_type"):
        return path, f"{msg[0].lower() + msg[1:]} (got {_describe_input(error.get('input'))})"
    if len(msg.split(" ")[0]) > 1 and msg.split(" ")[0].isupper():  # an acronym ("L2 capacity") keeps its case
        return path, msg
    return path, msg[0].lower() + msg[1:] if msg else kind


def validate(model: type[BaseModel], data: Mapping[str, Any], source: str,
             overrides: Sequence[tuple[str, Any]] = ()) -> Any:
    """Validate ``data`` as ``model``; the first problem becomes a one-line ConfigError.

    A problem at (or below) a key that came from ``--set`` is reported against ``--set``.
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # An unknown key is reported first: a misspelled required key is also "missing", and the typo
        # (with its did-you-mean) is what the user has to fix.
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        path, message = validation_message(model, first)
        error_type = KeyPathError if first["type"] == "extra_forbidden" else ConfigError
        for key, _ in overrides:
            if path == key or path.startswith(key + ".") or key.startswith(path + ".") and path:
                raise error_type(SET_SOURCE, path, message) from None
        further = []
        for error in errors:
            key, text = validation_message(model, error)
            # a misspelled required key is also missing: its did-you-mean already says so
            if error is first or (error["type"] == "missing" and f"did you mean {key.rpartition('.')[2]}?" in message):
                continue
            line = str(ConfigError(source, key, text))
            if line not in further:
                further.append(line)
        raise error_type(source, path, message, tuple(further)) from None
