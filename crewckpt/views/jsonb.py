"""Decoder of SQLite's JSONB binary format, without SQLite.

CrewAI's ``SqliteProvider`` stores checkpoints as ``jsonb(?)``, which SQLite < 3.45 cannot read (this
machine has 3.40.1). This module turns such a BLOB back into the JSON text SQLite's ``json()`` returns
(:func:`jsonb_to_text`) or into the Python value ``json.loads`` of that text gives (:func:`jsonb_to_value`,
key order kept).

Source of the rules: SQLite's ``doc/jsonb.md`` (https://sqlite.org/jsonb.html) and
``jsonTranslateBlobToText`` in ``src/json.c`` (3.45-3.54):

* An element is a header and a payload. The header's first byte holds the element type (low 4 bits)
  and the payload size (high 4 bits: 0-11 is the size; 12, 13, 14, 15 say that a 1, 2, 4 or 8 byte
  big-endian size follows). Headers need not be minimal.
* Types: 0 NULL, 1 TRUE, 2 FALSE, 3 INT, 4 INT5 (hex), 5 FLOAT, 6 FLOAT5 (digits missing beside "."),
  7 TEXT (nothing to escape), 8 TEXTJ (RFC 8259 escapes), 9 TEXT5 (JSON5 escapes), 10 TEXTRAW
  (unescaped; must be escaped when rendered), 11 ARRAY, 12 OBJECT (label/value pairs, labels are
  text types). 13-15 are reserved: an error.
* A valid BLOB is exactly one element that fills it.

Where SQLite silently renders garbage for a malformed BLOB, this decoder raises :class:`JsonbError`
instead, so that its output is always valid JSON. NULL/TRUE/FALSE with a payload are read as
null/true/false and their payload skipped, as the spec asks of legacy readers.
"""

from __future__ import annotations

import json
import re
from typing import Any

from crewckpt.errors import JsonbError

__all__ = ["MAX_DEPTH", "JsonbError", "jsonb_to_text", "jsonb_to_value", "looks_like_jsonb"]

MAX_DEPTH = 1000
"""Deepest nesting accepted (SQLite's JSON_MAX_DEPTH)."""

(NULL, TRUE, FALSE, INT, INT5, FLOAT, FLOAT5, TEXT, TEXTJ, TEXT5, TEXTRAW, ARRAY, OBJECT) = range(13)
_TEXT_TYPES = (TEXT, TEXTJ, TEXT5, TEXTRAW)
_SIZE_BYTES = {12: 1, 13: 2, 14: 4, 15: 8}

_INT_RE = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT_RE = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_HEX_RE = re.compile(r"([-+]?)0[xX]([0-9a-fA-F]+)")
_DEC5_RE = re.compile(r"[-+]?[0-9]+")
# The body of a valid JSON string (between the quotes).
_JSON_STR_BODY_RE = re.compile(r'(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*')
_NEEDS_ESCAPE_RE = re.compile(r'["\\\x00-\x1f]')
_SHORT_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def looks_like_jsonb(blob: bytes) -> bool:
    """SQLite's quick test: the outer header is well-formed, of a known type, and fills ``blob`` exactly."""
    try:
        etype, _, end = _header(blob, 0, len(blob))
    except JsonbError:
        return False
    return etype <= OBJECT and end == len(blob)


def jsonb_to_text(blob: bytes) -> str:
    """Render a JSONB BLOB as the minified JSON text SQLite's ``json()`` returns for it.

    Raises:
        JsonbError: the BLOB is not one well-formed JSONB element, a number or string payload is
            invalid, or nesting exceeds :data:`MAX_DEPTH`.
    """
    buf = memoryview(blob) if not isinstance(blob, memoryview) else blob
    out: list[str] = []
    # Each frame: [payload end, is_object, number of children so far]
    stack: list[list[Any]] = []
    i, n = 0, len(buf)
    while True:
        if stack:
            frame = stack[-1]
            if i == frame[0]:
                if frame[1] and frame[2] % 2:
                    raise JsonbError(i, "object label without a value")
                out.append("}" if frame[1] else "]")
                stack.pop()
                if not stack:
                    break
                continue
            if frame[2]:
                out.append(":" if frame[1] and frame[2] % 2 else ",")
            limit = frame[0]
        else:
            limit = n
        etype, start, end = _header(buf, i, limit)
        if stack and stack[-1][1] and stack[-1][2] % 2 == 0 and etype not in _TEXT_TYPES:
            raise JsonbError(i, f"object label of type {etype}, not text")
        if stack:
            stack[-1][2] += 1
        if etype == ARRAY or etype == OBJECT:
            if len(stack) >= MAX_DEPTH:
                raise JsonbError(i, f"nested deeper than {MAX_DEPTH}")
            out.append("{" if etype == OBJECT else "[")
            stack.append([end, etype == OBJECT, 0])
            i = start
            continue
        out.append(_scalar_text(etype, buf, i, start, end))
        i = end
        if not stack:
            break
    if i != n:
        raise JsonbError(i, f"{n - i} trailing bytes after the element")
    return "".join(out)


def jsonb_to_value(blob: bytes) -> Any:
    """Decode a JSONB BLOB to the Python value ``json.loads(jsonb_to_text(blob))`` gives, key order kept.

    Integers become ``int``, floats ``float`` (``9e999`` is ``inf``), strings ``str``; duplicate
    object labels keep the last value at the first position, as ``json.loads`` does.

    Raises:
        JsonbError: as :func:`jsonb_to_text`.
    """
    buf = bytes(blob)
    # Each frame: [payload end, container, is object, pending label or _NO_LABEL]
    stack: list[list[Any]] = []
    i, n = 0, len(buf)
    value: Any = None
    frame: list[Any] | None = None
    no_label = _NO_LABEL
    needs_escape = _NEEDS_ESCAPE_RE.search
    while True:
        if frame is not None and i == frame[0]:
            if frame[3] is not no_label:
                raise JsonbError(i, "object label without a value")
            value = frame[1]
            stack.pop()
            frame = stack[-1] if stack else None
        else:
            limit = frame[0] if frame is not None else n
            # Inline fast path for the common headers (1-3 bytes); _header handles the rest and errors.
            first = buf[i] if i < limit else -1
            x = first >> 4
            if 0 <= x <= 11:
                etype, start, end = first & 0x0F, i + 1, i + 1 + x
            elif x == 12 and i + 2 <= limit:
                etype, start, end = first & 0x0F, i + 2, i + 2 + buf[i + 1]
            elif x == 13 and i + 3 <= limit:
                etype, start, end = first & 0x0F, i + 3, i + 3 + (buf[i + 1] << 8 | buf[i + 2])
            else:
                etype, start, end = _header(buf, i, limit)
            if end > limit or etype > OBJECT:
                etype, start, end = _header(buf, i, limit)  # raises the precise error
            expecting_label = frame is not None and frame[2] and frame[3] is no_label
            if etype >= ARRAY:
                if expecting_label:
                    raise JsonbError(i, f"object label of type {etype}, not text")
                if len(stack) >= MAX_DEPTH:
                    raise JsonbError(i, f"nested deeper than {MAX_DEPTH}")
                frame = [end, {} if etype == OBJECT else [], etype == OBJECT, no_label]
                stack.append(frame)
                i = start
                continue
            if etype == TEXT:
                try:
                    value = buf[start:end].decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise JsonbError(start + exc.start, "payload is not valid UTF-8") from None
                if needs_escape(value):
                    raise JsonbError(i, "TEXT element holds a character that needs escaping")
            else:
                if expecting_label and etype not in _TEXT_TYPES:
                    raise JsonbError(i, f"object label of type {etype}, not text")
                value = _scalar_value(etype, buf, i, start, end)
            i = end
        if frame is None:
            break
        if not frame[2]:
            frame[1].append(value)
        elif frame[3] is no_label:
            frame[3] = value
        else:
            frame[1][frame[3]] = value
            frame[3] = no_label
    if i != n:
        raise JsonbError(i, f"{n - i} trailing bytes after the element")
    return value


_NO_LABEL = object()


def _header(buf: bytes | memoryview, i: int, limit: int) -> tuple[int, int, int]:
    """Read the header at ``i``; return (type, payload start, payload end). The element must end by ``limit``."""
    if i >= limit:
        raise JsonbError(i, "truncated: element header missing")
    first = buf[i]
    etype, x = first & 0x0F, first >> 4
    if etype > OBJECT:
        raise JsonbError(i, f"reserved element type {etype}")
    if x <= 11:
        start, size = i + 1, x
    else:
        width = _SIZE_BYTES[x]
        start = i + 1 + width
        if start > limit:
            raise JsonbError(i, "truncated: element header cut short")
        size = int.from_bytes(buf[i + 1 : start], "big")
    end = start + size
    if end > limit:
        raise JsonbError(i, f"truncated: payload of {size} bytes overruns its container by {end - limit}")
    return etype, start, end


def _payload_str(buf: bytes | memoryview, i: int, start: int, end: int) -> str:
    try:
        return str(buf[start:end], "utf-8")
    except UnicodeDecodeError as exc:
        raise JsonbError(start + exc.start, "payload is not valid UTF-8") from None


def _scalar_text(etype: int, buf: bytes | memoryview, i: int, start: int, end: int) -> str:
    """JSON text of a non-container element."""
    if etype == NULL:
        return "null"
    if etype == TRUE:
        return "true"
    if etype == FALSE:
        return "false"
    s = _payload_str(buf, i, start, end)
    if etype == TEXT:
        if _NEEDS_ESCAPE_RE.search(s):
            raise JsonbError(i, "TEXT element holds a character that needs escaping")
        return f'"{s}"'
    if etype == TEXTJ:
        return _checked_json_string(i, s)
    if etype == TEXTRAW:
        return _escape_raw(s)
    if etype == TEXT5:
        return _checked_json_string(i, _text5_to_json(i, s))
    return _number_text(etype, i, s)


def _scalar_value(etype: int, buf: bytes | memoryview, i: int, start: int, end: int) -> Any:
    """Python value of a non-container element."""
    if etype == NULL:
        return None
    if etype == TRUE:
        return True
    if etype == FALSE:
        return False
    s = _payload_str(buf, i, start, end)
    if etype == TEXT:
        if _NEEDS_ESCAPE_RE.search(s):
            raise JsonbError(i, "TEXT element holds a character that needs escaping")
        return s
    if etype == TEXTRAW:
        return s
    if etype == TEXTJ or etype == TEXT5:
        return json.loads(_scalar_text(etype, buf, i, start, end))
    text = _number_text(etype, i, s)
    if etype == INT or (etype == INT5 and "e" not in text):
        try:
            return int(text)
        except ValueError:  # over sys.get_int_max_str_digits(): json.loads (so CrewAI) refuses it too
            raise JsonbError(i, f"integer of {len(text):,} digits, more than Python's json reads") from None
    return float(text)


def _number_text(etype: int, i: int, s: str) -> str:
    """Canonical JSON text of a number payload (INT, INT5, FLOAT, FLOAT5)."""
    if etype == INT:
        if not _INT_RE.fullmatch(s):
            raise JsonbError(i, f"bad INT payload {s[:40]!r}")
        return s
    if etype == FLOAT:
        if not _FLOAT_RE.fullmatch(s):
            raise JsonbError(i, f"bad FLOAT payload {s[:40]!r}")
        return s
    if etype == INT5:
        m = _HEX_RE.fullmatch(s)
        if m:
            sign = "-" if m.group(1) == "-" else ""
            u = int(m.group(2), 16)
            # SQLite stops at 64 bits and prints an infinity (json.c, JSONB_INT5).
            return sign + ("9.0e999" if u >= 1 << 64 else str(u))
        if _DEC5_RE.fullmatch(s):
            try:
                return str(int(s))
            except ValueError:  # over sys.get_int_max_str_digits()
                raise JsonbError(i, f"integer of {len(s):,} digits, more than Python's json reads") from None
        raise JsonbError(i, f"bad INT5 payload {s[:40]!r}")
    if etype == FLOAT5:
        # Supply the digit missing beside ".": ".5" -> "0.5", "5." -> "5.0", "5.e3" -> "5.0e3".
        neg = s.startswith("-")
        body = s[1:] if neg or s.startswith("+") else s
        if body.startswith("."):
            body = "0" + body
        body = re.sub(r"\.(?![0-9])", ".0", body)
        text = ("-" if neg else "") + body
        if not _FLOAT_RE.fullmatch(text):
            raise JsonbError(i, f"bad FLOAT5 payload {s[:40]!r}")
        return text
    raise JsonbError(i, f"element type {etype} is not a number")  # pragma: no cover - callers filter


def _checked_json_string(i: int, body: str) -> str:
    if not _JSON_STR_BODY_RE.fullmatch(body):
        raise JsonbError(i, "string holds an invalid escape or an unescaped control character")
    return f'"{body}"'


def _escape_raw(s: str) -> str:
    """Quote and escape a raw string as SQLite's jsonAppendString does (\\uXXXX lowercase hex)."""
    if not _NEEDS_ESCAPE_RE.search(s):
        return f'"{s}"'
    return '"' + _NEEDS_ESCAPE_RE.sub(_escape_char, s) + '"'


def _escape_char(m: re.Match[str]) -> str:
    c = m.group(0)
    return _SHORT_ESCAPES.get(c) or f"\\u{ord(c):04x}"


_TEXT5_ESCAPE_RE = re.compile(r"\\(x[0-9a-fA-F]{2}|\r\n|[\s\S])|[\"\x00-\x1f]")
_TEXT5_SIMPLE = {"'": "'", "v": "\\u000b", "0": "\\u0000", "\n": "", "\r": "", "\r\n": "", "\u2028": "", "\u2029": ""}


def _text5_to_json(i: int, s: str) -> str:
    """Translate a TEXT5 payload (JSON5 escapes) into the body of an RFC 8259 string."""

    def repl(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc is None:  # an unescaped '"' or control character
            return _escape_char(m)
        if esc in _TEXT5_SIMPLE:
            return _TEXT5_SIMPLE[esc]
        if esc[0] == "x":
            if len(esc) != 3:
                raise JsonbError(i, "TEXT5 \\x escape without two hex digits")
            return "\\u00" + esc[1:]
        return "\\" + esc  # RFC 8259 escapes pass through; validated by the caller

    return _TEXT5_ESCAPE_RE.sub(repl, s)
