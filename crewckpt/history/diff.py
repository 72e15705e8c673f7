"""Generic JSON diff (pure functions over JSON values; knows no document shape).

:func:`diff_json` compares any two JSON values path by path; :func:`render_changes` renders its changes as
tagged text lines. The CrewAI-aware diff (:mod:`crewckpt.views.diff`) builds on the pieces here: the change
walk, the item matcher and the map diff.

Result schema "crewckpt.jsondiff/1" (JSON-serialisable)::

    {"schema": "crewckpt.jsondiff/1", "identical": bool,
     "sizes": {"old_bytes", "new_bytes", "delta_bytes"},        # compact JSON bytes
     "changes": [Change], "changes_truncated": int}
    Change = {"path": str, "op": "added" | "removed" | "changed", "old"?: v, "new"?: v}

Paths are JSON paths usable with ``ckpt show --path``. Values larger than VALUE_PREVIEW_BYTES in a Change
become a string like ``"<object: 12 keys, 3456 bytes>"``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from crewckpt.history.jsonpath import PathPart, format_path
from crewckpt.history.jsontext import compact
from crewckpt.history.jsontext import same_json as same

JSON_SCHEMA = "crewckpt.jsondiff/1"
MAX_CHANGES = 500
VALUE_PREVIEW_BYTES = 1000

Line = tuple[str, str]
"""A rendered line: ``(tag, text)``; tags name the kind of line ("header", "added", "removed", "changed",
"hunk", "meta", "plain"), not a colour, so each UI styles them its own way."""


def diff_json(old: Any, new: Any, *, max_changes: int = MAX_CHANGES) -> dict[str, Any]:
    """Compare two JSON values; returns the "crewckpt.jsondiff/1" dict of the module docstring. At most
    ``max_changes`` changes are listed (the rest counted in ``changes_truncated``). Never raises on JSON values."""
    changes = ChangeList(max_changes)
    walk(old, new, [], changes)
    old_bytes, new_bytes = json_bytes(old), json_bytes(new)
    return {"schema": JSON_SCHEMA, "identical": same(old, new),
            "sizes": {"old_bytes": old_bytes, "new_bytes": new_bytes, "delta_bytes": new_bytes - old_bytes},
            "changes": changes.items, "changes_truncated": changes.dropped}


def render_changes(changes: list[dict[str, Any]]) -> list[Line]:
    """One line per Change: ``+ path: value``, ``- path: value``, ``~ path: old -> new`` (values shortened)."""
    out: list[Line] = []
    for change in changes:
        if change["op"] == "added":
            out.append(("added", f"  + {change['path']}: {short(change['new'])}"))
        elif change["op"] == "removed":
            out.append(("removed", f"  - {change['path']}: {short(change['old'])}"))
        else:
            out.append(("changed", f"  ~ {change['path']}: {short(change['old'])} -> {short(change['new'])}"))
    return out


def short(value: Any, width: int = 60) -> str:
    """``value`` as one line of JSON, cut to ``width`` characters."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def plain_text(lines: list[Line]) -> str:
    """Join rendered lines without styling (for files, pipes and tests)."""
    return "\n".join(text for _, text in lines)


def human_bytes(n: int) -> str:
    """1536 -> "1.5 KB" (decimal units, like CrewAI's own figures and the README)."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{sign}{n} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------------------------------
# the change walk


class ChangeList:
    """Collects Change dicts up to a cap, counting the ones dropped."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.items: list[dict[str, Any]] = []
        self.dropped = 0

    def add(self, path: list[PathPart], op: str, old: Any = None, new: Any = None) -> None:
        if len(self.items) >= self.cap:
            self.dropped += 1
            return
        change: dict[str, Any] = {"path": format_path(path) or "$", "op": op}
        if op != "added":
            change["old"] = preview(old)
        if op != "removed":
            change["new"] = preview(new)
        self.items.append(change)


def walk(old: Any, new: Any, path: list[PathPart], out: ChangeList) -> None:
    """Append a Change for every leaf-level difference between ``old`` and ``new`` (depth first)."""
    if same(old, new):
        return
    if isinstance(old, dict) and isinstance(new, dict):
        before = len(out.items) + out.dropped
        for key in old:
            if key not in new:
                out.add(path + [key], "removed", old=old[key])
            else:
                walk(old[key], new[key], path + [key], out)
        for key in new:
            if key not in old:
                out.add(path + [key], "added", new=new[key])
        if len(out.items) + out.dropped == before:  # the same entries in another order: JSON text differs
            out.add(path, "changed", old=old, new=new)
        return
    if isinstance(old, list) and isinstance(new, list):
        common = min(len(old), len(new))
        for i in range(common):
            walk(old[i], new[i], path + [i], out)
        for i in range(common, len(old)):
            out.add(path + [i], "removed", old=old[i])
        for i in range(common, len(new)):
            out.add(path + [i], "added", new=new[i])
        return
    out.add(path, "changed", old=old, new=new)


class Pair(NamedTuple):
    """Two matched items (or one, added or removed) and how they were matched (see :func:`match`)."""

    old_index: int | None
    new_index: int | None
    matched_by: str | None  # the key that paired them; None for an added or removed item
    old: Any
    new: Any
    either: Any  # new if present, else old


def match(old: list[Any], new: list[Any], keys: list[tuple[str, Callable[[Any], Any]]]) -> list[Pair]:
    """Pair items of ``old`` and ``new`` by each key function in turn (first unmatched occurrence wins).

    Returns pairs in new-list order, then the removed items in old order; an unpaired side is None.
    """
    old_free = list(range(len(old)))
    pair_of_new: dict[int, tuple[int, str]] = {}
    for name, key in keys:
        by_key: dict[Any, list[int]] = {}
        for i in old_free:
            k = _hashable(key(old[i]))
            if k is not None:
                by_key.setdefault(k, []).append(i)
        for j in range(len(new)):
            if j in pair_of_new:
                continue
            k = _hashable(key(new[j]))
            if k is not None and by_key.get(k):
                i = by_key[k].pop(0)
                pair_of_new[j] = (i, name)
                old_free.remove(i)
    result: list[Pair] = []
    for j, item in enumerate(new):
        if j in pair_of_new:
            i, name = pair_of_new[j]
            result.append(Pair(i, j, name, old[i], item, item))
        else:
            result.append(Pair(None, j, None, None, item, item))
    result.extend(Pair(i, None, None, old[i], None, old[i]) for i in old_free)
    return result


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return orjson.dumps(value, default=str)
    return value


def op(a: Any, b: Any) -> str:
    """"added" when ``a`` is None, "removed" when ``b`` is None, else "unchanged" or "changed"."""
    if a is None:
        return "added"
    if b is None:
        return "removed"
    return "unchanged" if same(a, b) else "changed"


def changed_keys(a: Any, b: Any) -> list[str]:
    """Keys whose values differ between two objects (in ``a``'s then ``b``'s order); [] unless both are dicts."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return []
    return [k for k in {**a, **b} if not same(a.get(k, _MISSING), b.get(k, _MISSING))]


_MISSING = object()


def map_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``{"added": {k: v}, "removed": {k: v}, "changed": {k: {"old", "new"}}}`` between two flat maps."""
    return {
        "added": {k: v for k, v in new.items() if k not in old},
        "removed": {k: v for k, v in old.items() if k not in new},
        "changed": {k: {"old": old[k], "new": new[k]} for k in new if k in old and not same(old[k], new[k])},
    }


def json_bytes(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON."""
    return len(compact(value))


def preview(value: Any) -> Any:
    """``value`` itself when small, else a ``"<object: n keys, m bytes>"``-style stand-in."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    size = json_bytes(value)
    if size <= VALUE_PREVIEW_BYTES:
        return value
    if isinstance(value, dict):
        return f"<object: {len(value)} keys, {size} bytes>"
    if isinstance(value, list):
        return f"<list: {len(value)} items, {size} bytes>"
    return f"<string: {len(value)} characters, {size} bytes>" if isinstance(value, str) else f"<{size} bytes>"
