"""Document sizes: the ``logical_bytes`` every commit summary records (bytes of the document as compact JSON).

What else a summary holds is the store profile's business (:mod:`crewckpt.history.profile`).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from crewckpt.errors import DocumentTooLarge
from crewckpt.history.limits import MAX_DEPTH
from crewckpt.history.snapshot import Frozen, Parts, concat_size, not_json


def json_size(doc: Any) -> int:
    """Bytes of ``doc`` as compact UTF-8 JSON (the 'logical' size). A :class:`Frozen` with ``json_bytes`` counts
    those bytes without being dumped or copied again and a :class:`Parts` value sums its pieces, so a document
    made mostly of Frozen values is sized in time proportional to its plain part."""
    extra = 0

    def hint(v: Any) -> Any:
        nonlocal extra
        if isinstance(v, Frozen):
            if v.size is None:
                return v.value
            extra += v.size - 4  # dumped as the placeholder null
            return None
        if isinstance(v, Parts):  # a Frozen piece with its size (an event record's sealed pieces) is not dumped
            sizes: list[int | None] = [p.size if isinstance(p, Frozen) and p.size is not None else json_size(p)
                                       for p in v.pieces]
            extra += concat_size(sizes) - 4  # type: ignore[operator]  # every size is known here
            return None
        raise TypeError(f"value of type {type(v).__name__} is not JSON")

    try:
        return len(orjson.dumps(doc, default=hint)) + extra
    except (TypeError, orjson.JSONEncodeError):  # big ints, lone surrogates, deep nesting
        return _walk_size(doc)


def _scalar_size(v: Any) -> int:
    try:
        return len(json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    except TypeError:  # json's own message names no fix
        raise not_json(v) from None


def _walk_size(doc: Any) -> int:
    """Compact-JSON length without recursion. Raises DocumentTooLarge for nesting deeper than MAX_DEPTH
    (orjson, which every JSON output uses, stops there; this path runs only when orjson refused the doc)."""
    total = 0
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        v, level = stack.pop()
        if isinstance(v, Frozen):
            if v.size is not None:
                total += v.size
            else:
                stack.append((v.value, level))
        elif isinstance(v, Parts):
            stack.append((v.plain(), level))
        elif isinstance(v, (dict, list, tuple)):
            if level >= MAX_DEPTH:
                loop = _cycle_path(doc)
                if loop is not None:
                    raise ValueError(f"the document contains itself (circular reference at {loop}); JSON cannot "
                                     f"hold a value that contains itself: store a copy or an id instead")
                raise DocumentTooLarge(f"the document nests containers deeper than {MAX_DEPTH} levels, the most "
                                       f"crewckpt stores (JSON tools stop there); flatten it")
            if isinstance(v, dict):
                total += 2 + max(len(v) - 1, 0) + len(v) + sum(_scalar_size(k) for k in v)
                stack.extend((x, level + 1) for x in v.values())
            else:
                total += 2 + max(len(v) - 1, 0)
                stack.extend((x, level + 1) for x in v)
        else:
            total += _scalar_size(v)
    return total


def _cycle_path(doc: Any) -> str | None:
    """The path (``$.a[0]``) of a container that contains itself, within MAX_DEPTH + 1 levels, or None."""
    on_path: set[int] = set()
    stack: list[tuple[Any, str, bool]] = [(doc, "$", False)]
    while stack:
        v, path, leaving = stack.pop()
        if isinstance(v, Frozen):
            v = v.value
        if isinstance(v, Parts):
            v = v.plain()
        if leaving:
            on_path.discard(id(v))
            continue
        if not isinstance(v, (dict, list, tuple)):
            continue
        if id(v) in on_path:
            return path
        if len(on_path) > MAX_DEPTH + 1:
            continue
        on_path.add(id(v))
        stack.append((v, path, True))
        items = v.items() if isinstance(v, dict) else enumerate(v)
        for k, x in items:
            stack.append((x, f"{path}.{k}" if isinstance(k, str) else f"{path}[{k}]", False))
    return None
