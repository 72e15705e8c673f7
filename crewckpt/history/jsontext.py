"""JSON text of any value the store holds, for output (CLI, views): orjson, with a fallback for what it refuses.

A stored document may hold lone surrogates ("\\ud800": JSON allows the escape; the format stores them as
WTF-8) and ints beyond 64 bits. orjson refuses both; its output is also UTF-8 only. :func:`dumps` then falls
back to :mod:`json` with orjson's layout and writes each lone surrogate as its ``\\uXXXX`` escape, as
``json.dumps`` does with ``ensure_ascii``: the text is valid UTF-8 and parses back to the same value.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from typing import Any

import orjson

_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written as its JSON escape ``\\udXXX`` (only valid inside a JSON
    string, where :mod:`json` leaves them raw with ``ensure_ascii=False``). Cheap when there is none."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) if _SURROGATE.search(text) else text


def dumps(value: Any, *, indent: bool = False, sort_keys: bool = False,
          default: Callable[[Any], Any] | None = None) -> str:
    """``value`` as JSON text: compact (orjson's ``,``/``:``) or ``indent`` (2 spaces, ``": "``).

    Same text as ``orjson.dumps(...).decode()`` whenever orjson accepts the value (NaN/Infinity become
    null, as orjson writes them); values orjson refuses (lone surrogates, ints beyond 64 bits) are written
    by :mod:`json` in the same layout. Raises TypeError for a value that is not JSON (after ``default``)
    and ValueError/RecursionError for a circular or too deep one."""
    option = (orjson.OPT_INDENT_2 if indent else 0) | (orjson.OPT_SORT_KEYS if sort_keys else 0)
    try:
        return orjson.dumps(value, default=default, option=option).decode()
    except (TypeError, orjson.JSONEncodeError):
        pass
    text = json.dumps(
        _finite(value), ensure_ascii=False, default=default, sort_keys=sort_keys,
        indent=2 if indent else None, separators=(",", ": ") if indent else (",", ":"),
    )  # fmt: skip
    return escape_surrogates(text)


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (orjson's rule; json would write the invalid ``NaN``)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_NUMBER = b"0" * 19  # the shortest integer literal beyond -2**63..2**64-1 (-9223372036854775809)


def loads(text: str | bytes) -> Any:
    """``orjson.loads(text)``, exact for integers beyond 64 bits: orjson reads those as floats (``2**64`` as
    1.8446744073709552e19, silently), so a text holding a run of 19 or more digits is parsed again by
    :mod:`json` (exact ints, the same floats and strings). The check is one C pass (~1 GB/s); such runs are
    rare (none in a 100-task CrewAI run). Raises what ``orjson.loads`` raises (callers' fallbacks for lone
    surrogates stay as they are)."""
    value = orjson.loads(text)
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if _LONG_NUMBER in raw.translate(_DIGITS_TO_ZERO):
        return json.loads(text)
    return value


def copy_json(value: Any) -> tuple[Any, int | None]:
    """An independent copy of a parsed JSON value and its compact JSON size in bytes: through orjson (C speed;
    what orjson writes it reads back exactly), else (ints beyond 64 bits, lone surrogates: orjson refuses to
    write them) a deep copy and None for the size."""
    try:
        data = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return copy.deepcopy(value), None
    return orjson.loads(data), len(data)


def compact(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON bytes (lone surrogates as their 3 bytes each, as stored). Raises
    TypeError for a value that is not JSON."""
    try:
        return orjson.dumps(value)
    except TypeError:  # ints beyond 64 bits, lone surrogates or other values orjson refuses
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same JSON text: Python's ``==`` is not enough (``1 == 1.0 == True``,
    ``0.0 == -0.0``, dicts equal in any key order), and the store keeps each of those apart (their ids
    differ), so a cache keyed on ``==`` would reuse a stale value."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (dict, list, float)):
        return compact(a) == compact(b)
    return bool(a == b)
