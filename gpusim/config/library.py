"""Built-in descriptions and name resolution, and loading of hardware descriptions.

A user names hardware by the stem of a built-in file (``h100_sxm5_80gb``) or by a path. Built-in
files live in ``hwconfigs/`` and ``workloads/`` at the top of the source tree; an installed wheel
carries copies under ``gpusim/_builtin/``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Iterable, Sequence

from gpusim.config.hardware import DESCRIPTION_CLASSES, HardwareDescription
from gpusim.config.loader import SET_SOURCE, apply_overrides, deep_merge, parse_set_items, read_yaml, validate
from gpusim.errors import ConfigError

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def builtin_dir(kind: str) -> Path:
    """The folder of built-in ``hwconfigs`` or ``workloads`` (installed copy first, then the source tree)."""
    for candidate in (_PACKAGE_DIR / "_builtin" / kind, _PACKAGE_DIR.parent / kind):
        if candidate.is_dir():
            return candidate
    raise ConfigError(kind, "", "built-in folder not found; is gpusim installed correctly?")


def builtin_files(kind: str) -> dict[str, Path]:
    """Map of stem -> path of every built-in YAML file of ``kind`` (searched recursively)."""
    files: dict[str, Path] = {}
    for path in sorted(builtin_dir(kind).rglob("*.yaml")):
        files.setdefault(path.stem, path)
    return files


def resolve(name_or_path: str | Path, kind: str, relative_to: Path | None = None) -> Path:
    """A path for a built-in stem or a file path (tried relative to ``relative_to`` first)."""
    text = str(name_or_path)
    candidates = []
    if relative_to is not None:
        candidates.append(relative_to / text)
    candidates.append(Path(text))
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looks_like_path = "/" in text or text.endswith((".yaml", ".yml"))
    stem = Path(text).stem if text.endswith((".yaml", ".yml")) and "/" not in text else text
    files = builtin_files(kind)
    if stem in files and not ("/" in text):
        return files[stem]
    if any(c.is_dir() for c in candidates):
        raise ConfigError(text, "", "is a directory, not a file")
    if looks_like_path:
        raise ConfigError(text, "", "file not found")
    close = [n for n in files if n.startswith(text)][:3] or difflib.get_close_matches(text, list(files), n=1, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else f"; see `gpusim {'hw' if kind == 'hwconfigs' else 'workload'} list`"
    raise ConfigError(text, "", f"no such file or built-in name{hint}")


def display_path(path: Path, kind: str) -> str:
    """How error messages name a file: ``hwconfigs/x.yaml`` for built-ins, the given path otherwise."""
    root = builtin_dir(kind)
    resolved = path.resolve()
    if resolved.is_relative_to(root.resolve()):
        return f"{kind}/{resolved.relative_to(root.resolve())}"
    return str(path)


def _load_raw(path: Path, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a description and fold in its ``extends:`` chain (overlay wins)."""
    if path.resolve() in {p.resolve() for p in chain}:
        raise ConfigError(str(chain[0]), "extends", "cycle: " + " -> ".join(p.name for p in chain + (path,)))
    data = read_yaml(path)
    if chain:
        # A system's gpu:/host_cpu: file reference is relative to the file that wrote it, also when
        # it is inherited by a description in another folder.
        for key in ("gpu", "host_cpu"):
            ref = data.get(key)
            if isinstance(ref, str) and (path.parent / ref).is_file():
                data[key] = str((path.parent / ref).resolve())
    parent_ref = data.pop("extends", None)
    if parent_ref is None:
        return data
    if not isinstance(parent_ref, str):
        raise ConfigError(str(path), "extends", "must be a built-in name or a file path")
    try:
        parent_path = resolve(parent_ref, "hwconfigs", relative_to=path.parent)
    except ConfigError as exc:
        raise ConfigError(str(path), "extends", exc.message) from None
    parent = _load_raw(parent_path, chain + (path,))
    kind, parent_kind = data.get("kind"), parent.get("kind")
    kinds = {k for k in (kind, parent_kind) if isinstance(k, str) and k in DESCRIPTION_CLASSES}
    if len(kinds) == 2:  # two valid kinds that differ (an invalid one is the schema's to report)
        raise ConfigError(str(path), "kind", f"{kind!r} differs from {parent_kind!r}, the kind of {parent_ref} "
                                             "that this file extends (an extension keeps its base's kind)")
    # The child's own identity wins; sources merge key by key.
    merged = deep_merge(parent, data)
    _drop_citations_of_removed(merged, data)
    return merged


def read_description(path: Path) -> dict[str, Any]:
    """A description file's raw mapping with its ``extends:`` chain folded in, not validated."""
    return _load_raw(path)


def _removed_paths(overlay: dict[str, Any], prefix: str = "") -> list[str]:
    """Key paths an overlay removes with ``null``."""
    out: list[str] = []
    for key, value in overlay.items():
        if value is None:
            out.append(f"{prefix}{key}")
        elif isinstance(value, dict) and not (prefix == "" and key == "sources"):
            out.extend(_removed_paths(value, f"{prefix}{key}."))
    return out


def _drop_citations_of_removed(merged: dict[str, Any], overlay: dict[str, Any]) -> None:
    """An overlay that removes a section (``peer_links: null``) also drops the inherited citations of it."""
    sources = merged.get("sources")
    removed = [p for p in _removed_paths(overlay) if p != "sources"]
    if not removed or not isinstance(sources, dict):
        return
    own = overlay.get("sources") if isinstance(overlay.get("sources"), dict) else {}
    for key in list(sources):
        if key not in own and any(str(key) == p or str(key).startswith(p + ".") for p in removed):
            del sources[key]


def _embed(data: dict[str, Any], key: str, body_key: str, source: Path) -> None:
    """Replace a system's ``gpu: name`` / ``host_cpu: name`` reference by that description's body."""
    ref = data.get(key)
    if not isinstance(ref, str):
        return
    try:
        ref_path = resolve(ref, "hwconfigs", relative_to=source.parent)
    except ConfigError as exc:
        raise ConfigError(str(source), key, exc.message) from None
    ref_data = _load_raw(ref_path)
    if ref_data.get("kind") != body_key or not isinstance(ref_data.get(body_key), dict):
        raise ConfigError(str(source), key, f"{ref!r} is not a {body_key} description")
    data[key] = ref_data[body_key]
    sources = data.setdefault("sources", {})
    if isinstance(sources, dict):
        ref_sources = ref_data.get("sources")
        for k, v in (ref_sources.items() if isinstance(ref_sources, dict) else ()):
            # Citations of the embedded body move under ``key``; others (name, ...) are not embedded.
            if k == body_key or str(k).startswith(body_key + "."):
                sources.setdefault(key + str(k)[len(body_key):], v)


def _embed_set_reference(data: dict[str, Any], key: str) -> None:
    """Embed a ``--set gpu=NAME`` reference (a built-in name or a path from the working directory),
    its errors blamed on --set."""
    try:
        _embed(data, key, "gpu" if key == "gpu" else "cpu", Path(SET_SOURCE))  # its parent: the working directory
    except ConfigError as exc:
        raise ConfigError(SET_SOURCE, key, exc.message) from None


def _check_sources(data: dict[str, Any], source: str) -> None:
    """Every ``sources:`` key must name a key path that exists (so citations cannot go stale)."""
    sources = data.get("sources")
    if not isinstance(sources, dict):
        return
    for key in sources:
        node: Any = data
        for part in str(key).split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(source, f"sources.{key}", "cites a key that is not in this description")
            node = node[part]


def load_hardware(name_or_path: str | Path, overrides: Sequence[tuple[str, Any]] | Iterable[str] = ()
                  ) -> HardwareDescription:
    """Load, overlay and validate a hardware description. ``overrides`` are ``KEY.PATH=VALUE`` strings
    or parsed ``(key, value)`` pairs."""
    parsed = [o if isinstance(o, tuple) else None for o in overrides]
    pairs: list[tuple[str, Any]] = (
        parsed if all(p is not None for p in parsed) else parse_set_items(o for o in overrides)  # type: ignore[misc]
    )
    path = resolve(name_or_path, "hwconfigs")
    source = display_path(path, "hwconfigs")
    data = _load_raw(path)
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in DESCRIPTION_CLASSES:
        if kind is None:
            # a file with no hardware section may be a workload that lost its ops: or model:
            hint = ("" if {"gpu", "cpu", "gpus", "host_cpu", "nodes", "extends"} & set(data)
                    else "; a workload file has ops: or model: instead")
            raise ConfigError(source, "kind", f"missing required key (gpu, cpu or system){hint}")
        raise ConfigError(source, "kind", f"must be one of gpu, cpu, system (got {kind!r})")
    if "schema_version" not in data:
        raise ConfigError(source, "schema_version", "missing required key (this gpusim reads schema_version: 1)")
    if type(data["schema_version"]) is not int or data["schema_version"] != 1:  # not true, not 1.0
        raise ConfigError(source, "schema_version", f"unsupported version {data['schema_version']!r}; this gpusim reads 1")
    if kind == "system":
        # --set gpu=NAME (or host_cpu=NAME) swaps the referenced description, as the file's own
        # reference would; --set gpu.num_sms=... then edits the one embedded
        for ref_key in ("gpu", "host_cpu"):
            swapped = [value for key, value in pairs if key == ref_key and isinstance(value, str)]
            if swapped:
                data[ref_key] = swapped[-1]
                pairs = [(k, v) for k, v in pairs if not (k == ref_key and isinstance(v, str))]
                _embed_set_reference(data, ref_key)
        _embed(data, "gpu", "gpu", path)
        _embed(data, "host_cpu", "cpu", path)
    for key, _ in pairs:
        if key.split(".")[0] in ("kind", "schema_version"):
            raise ConfigError(SET_SOURCE, key, "cannot be overridden")
    model = DESCRIPTION_CLASSES[kind]
    try:
        desc = validate(model, apply_overrides(data, pairs), source, pairs)
    except ConfigError as exc:
        if not pairs or exc.source == SET_SOURCE:
            raise
        error = exc
    else:
        # After validation, so that a deleted or misspelled key is reported as such, not as a stale citation.
        _check_sources(data, source)
        return desc
    # A contradiction between a --set value and a value of the file (--set sm_clock_hz below the
    # file's tensor clock) is the --set's fault when the file alone is valid.
    validate(model, data, source)
    raise ConfigError(SET_SOURCE, error.key_path, error.message)


def list_hardware() -> list[tuple[str, Path]]:
    return sorted(builtin_files("hwconfigs").items())
