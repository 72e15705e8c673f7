"""A small JSON path syntax shared by `ckpt show --path`, `ckpt diff` and the TUI.

Syntax: dot-separated keys with bracketed list indexes, as a Python or JavaScript user would write it:
``entities[0].tasks[2].output.raw``. Keys that are not plain identifiers are written in brackets with
JSON string quoting: ``event_record.nodes["ab76a730-89ad-..."].event.type``. Negative indexes count from
the end (``tasks[-1]``). The empty string (or ``$``) names the whole document.
"""

from __future__ import annotations

import json
import re
from typing import Any

from crewckpt.errors import JsonPathError

PathPart = str | int

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TOKEN = re.compile(
    r"""
    \.?(?P<key>[A-Za-z_][A-Za-z0-9_\-]*)     # .key (also a leading key; dashes allowed)
  | \[(?P<index>-?\d+)\]                      # [3] or [-1]
  | \[(?P<quoted>"(?:[^"\\]|\\.)*")\]         # ["any key"]
    """,
    re.VERBOSE,
)


def parse_path(text: str) -> list[PathPart]:
    """Split ``text`` into keys (str) and list indexes (int).

    Raises JsonPathError naming the offending position when ``text`` is not in the syntax above.
    """
    text = text.strip()
    if text in ("", "$"):
        return []
    text = text.removeprefix("$")
    parts: list[PathPart] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise JsonPathError(
                f"bad JSON path {text!r} at character {pos + 1}: "
                'write keys as a.b, list items as [2], other keys as ["k-1"]'
            )
        if match.group("key") is not None:
            if pos > 0 and text[pos] != ".":
                raise JsonPathError(
                    f"bad JSON path {text!r} at character {pos + 1}: missing '.' before a key"
                )
            parts.append(match.group("key"))
        elif match.group("index") is not None:
            parts.append(int(match.group("index")))
        else:
            parts.append(json.loads(match.group("quoted")))
        pos = match.end()
    return parts


def format_path(parts: list[PathPart] | tuple[PathPart, ...]) -> str:
    """The inverse of parse_path: ``["entities", 0, "name"]`` -> ``entities[0].name``."""
    out: list[str] = []
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENT.match(part):
            out.append(f".{part}" if out else part)
        else:
            out.append(f"[{json.dumps(part)}]")
    return "".join(out)


def get_path(doc: Any, path: str | list[PathPart]) -> Any:
    """The value at ``path`` inside ``doc``.

    Raises JsonPathError naming the first part that does not exist (with the keys or length available).
    """
    parts = parse_path(path) if isinstance(path, str) else list(path)
    value = doc
    for depth, part in enumerate(parts):
        here = format_path(parts[:depth]) or "$"
        if isinstance(part, int):
            if not isinstance(value, list):
                raise JsonPathError(f"{here} is {_kind(value)}, not a list: cannot take [{part}]")
            if not -len(value) <= part < len(value):
                raise JsonPathError(f"{here} has {len(value)} items: index [{part}] is out of range")
            value = value[part]
        else:
            if isinstance(value, list) and part.lstrip("-").isdigit():
                value = get_path(value, [int(part)])
                continue
            if not isinstance(value, dict):
                raise JsonPathError(f"{here} is {_kind(value)}, not an object: cannot take .{part}")
            if part not in value:
                keys = ", ".join(list(value)[:12]) + (", ..." if len(value) > 12 else "")
                raise JsonPathError(f"{here} has no key {part!r} (keys: {keys or 'none'})")
            value = value[part]
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number"
    )
