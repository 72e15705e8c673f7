"""JSONB decoder: against an independent test encoder, real SQLite 3.54 (apsw) and CrewAI's cp.db."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from pathlib import Path

import pytest
from crewai_fixtures import FIXTURES  # vendored copy of the CrewAI 1.15.30 fixtures
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from crewckpt.views.jsonb import MAX_DEPTH, JsonbError, jsonb_to_text, jsonb_to_value, looks_like_jsonb

try:  # apsw ships its own SQLite (>= 3.45 has jsonb); the oracle tests need it
    import apsw  # type: ignore[no-redef]
except ImportError:  # pragma: no cover
    apsw = None
needs_apsw = pytest.mark.skipif(apsw is None, reason="apsw (SQLite >= 3.45) not installed")

NULL, TRUE, FALSE, INT, INT5, FLOAT, FLOAT5, TEXT, TEXTJ, TEXT5, TEXTRAW, ARRAY, OBJECT = range(13)


# --- an independent JSONB encoder, for tests only -----------------------------------------------


def header(etype: int, size: int, widen: int) -> bytes:
    """Header for a payload of ``size`` bytes; ``widen`` > 0 picks a larger-than-needed size field."""
    forms = []
    if size <= 11:
        forms.append(bytes([etype | size << 4]))
    if size <= 0xFF:
        forms.append(bytes([etype | 0xC0, size]))
    if size <= 0xFFFF:
        forms.append(bytes([etype | 0xD0]) + size.to_bytes(2, "big"))
    forms.append(bytes([etype | 0xE0]) + size.to_bytes(4, "big"))
    forms.append(bytes([etype | 0xF0]) + size.to_bytes(8, "big"))
    return forms[min(widen, len(forms) - 1)]


def text5_body(s: str, pick: int) -> str:
    out = []
    for k, c in enumerate(s):
        choice = (pick + k) % 4
        if c == "'" and choice:
            out.append("\\'")
        elif c == "\x0b":
            out.append("\\v")
        elif c == "\x00" and choice == 1:
            out.append("\\0")
        elif ord(c) < 256 and choice == 2:
            out.append(f"\\x{ord(c):02X}")
        elif c == '"':
            out.append('"' if choice == 3 else '\\"')  # TEXT5 may hold a raw '"'
        elif c == "\\":
            out.append("\\\\")
        elif ord(c) < 0x20:
            out.append(c if choice == 3 else f"\\u{ord(c):04x}")
        else:
            out.append(c)
        if choice == 0 and k % 5 == 0:
            out.append(("\\\n", "\\\r\n", "\\\u2028")[k % 3])  # line continuations vanish
    return "".join(out)


def encode(v: object, draw: st.DrawFn) -> bytes:
    widen = draw(st.integers(0, 4)) if draw(st.booleans()) else 0
    if v is None or isinstance(v, bool):
        # Minimal header: SQLite itself skips one byte past null/true/false whatever the header says.
        return header(NULL if v is None else (TRUE if v else FALSE), 0, 0)
    if isinstance(v, int):
        if draw(st.booleans()):
            # SQLite 3.54's json() rejects a JSONB INT5 payload with a '+' sign ("+0x10"; JSON5 text "+0x10"
            # is fine, jsonb() drops the sign): the encoder, where SQLite is the oracle, never writes one
            sign = "-" if v < 0 else ""
            p = sign + f"0{draw(st.sampled_from('xX'))}{abs(v):x}"
            return header(INT5, len(p), widen) + p.encode()
        p = str(v)
        return header(INT, len(p), widen) + p.encode()
    if isinstance(v, float):
        p = json.dumps(v)
        etype = FLOAT
        if draw(st.booleans()) and "." in p:
            mant, _, exp = p.partition("e")
            if mant.lstrip("-").startswith("0."):
                mant = mant.replace("0.", ".", 1)
                etype = FLOAT5
            elif mant.endswith(".0"):
                mant = mant[:-1]
                etype = FLOAT5
            p = mant + ("e" + exp if exp else "")
        return header(etype, len(p.encode()), widen) + p.encode()
    if isinstance(v, str):
        kinds = [TEXTJ, TEXTRAW, TEXT5]
        if not any(c in v for c in '"\\') and all(ord(c) >= 0x20 for c in v):
            kinds.append(TEXT)
        etype = draw(st.sampled_from(kinds))
        if etype == TEXTJ:
            body = json.dumps(v, ensure_ascii=draw(st.booleans()))[1:-1]
        elif etype == TEXT5:
            body = text5_body(v, draw(st.integers(0, 3)))
        else:
            body = v
        p = body.encode("utf-8", "surrogatepass")
        return header(etype, len(p), widen) + p
    if isinstance(v, list):
        p = b"".join(encode(x, draw) for x in v)
        return header(ARRAY, len(p), widen) + p
    assert isinstance(v, dict)
    p = b"".join(encode(k, draw) + encode(x, draw) for k, x in v.items())
    return header(OBJECT, len(p), widen) + p


scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(st.text(max_size=6), kids, max_size=5),
    max_leaves=25,
)


def same(a: object, b: object) -> bool:
    """Equal as JSON values, including key order and the int/float distinction."""
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return type(a) is type(b) and a == b


@st.composite
def encoded(draw: st.DrawFn) -> tuple[object, bytes]:
    v = draw(json_values)
    return v, encode(v, draw)


# --- round trips ----------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(encoded())
def test_decodes_what_the_encoder_wrote(case: tuple[object, bytes]) -> None:
    value, blob = case
    assert looks_like_jsonb(blob)
    decoded = jsonb_to_value(blob)
    assert same(decoded, value)
    text = jsonb_to_text(blob)
    assert same(json.loads(text), value)
    # RFC 8259 only: no NaN/Infinity constants reach the text.
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard constant {c}"))


@needs_apsw
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(encoded())
def test_text_matches_real_sqlite_json(case: tuple[object, bytes]) -> None:
    _, blob = case
    conn = apsw.Connection(":memory:")
    (expected,) = next(conn.execute("SELECT json(?)", (blob,)))
    assert jsonb_to_text(blob) == expected


json5_atoms = st.sampled_from(
    [
        "0x1F", "-0xff", "+0X10", "0xFFFFFFFFFFFFFFFF", "0x10000000000000000", "-0x10000000000000000",
        ".5", "-.25", "5.", "-7.", "5.e3", "1.5e-3", "+12", "Infinity", "-Infinity", "NaN",
        "'it''s'", "'a\\'b'", "'\\x41\\x7e'", "'tab\\there'", "'\\v\\0'", "'line\\\ncont'", "'q\"uote'",
        '"\\u00e9\\n"', "'\u00e9\u2028x'", "true", "null", "[]", "{}",
    ]
)


@needs_apsw
@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "'c'", "d5"]), json5_atoms), max_size=6))
def test_json5_element_types_match_real_sqlite(pairs: list[tuple[str, str]]) -> None:
    text5 = "{" + ",".join(f"{k}:{v}" for k, v in pairs) + ",}" if pairs else "[]"
    conn = apsw.Connection(":memory:")
    try:
        blob, expected = next(conn.execute("SELECT jsonb(?1), json(jsonb(?1))", (text5,)))
    except apsw.SQLError:
        assume(False)
    assert jsonb_to_text(blob) == expected
    assert same(jsonb_to_value(blob), json.loads(expected))


def test_crewai_sqlite_fixture_decodes_to_what_sqlite_345_reads(tmp_path: Path) -> None:
    db = tmp_path / "cp.db"
    shutil.copy(FIXTURES / "crew_sqlite_star" / "cp.db", db)
    rows = sqlite3.connect(db).execute("SELECT id, data FROM checkpoints ORDER BY rowid").fetchall()
    assert len(rows) == 26
    oracle = apsw.Connection(str(db)) if apsw else None
    for cid, blob in rows:
        value = jsonb_to_value(blob)
        assert list(value)[:3] == ["crewai_version", "parent_id", "branch"]
        text = jsonb_to_text(blob)
        assert same(json.loads(text), value)
        if oracle is not None:
            (expected,) = next(oracle.execute("SELECT json(data) FROM checkpoints WHERE id=?", (cid,)))
            assert text == expected


# --- malformed input ------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(encoded(), st.data())
def test_every_truncation_raises_jsonb_error(case: tuple[object, bytes], data: st.DataObject) -> None:
    _, blob = case
    cut = data.draw(st.integers(0, len(blob) - 1))
    with pytest.raises(JsonbError):
        jsonb_to_value(blob[:cut])
    with pytest.raises(JsonbError):
        jsonb_to_text(blob[:cut])
    assert not looks_like_jsonb(blob[:cut])


@settings(max_examples=300, deadline=None)
@given(encoded(), st.data())
def test_corruption_raises_only_jsonb_error(case: tuple[object, bytes], data: st.DataObject) -> None:
    _, blob = case
    pos = data.draw(st.integers(0, len(blob) - 1))
    bad = bytearray(blob)
    bad[pos] = data.draw(st.integers(0, 255))
    for decode in (jsonb_to_text, jsonb_to_value):
        try:
            out = decode(bytes(bad))
        except JsonbError as exc:
            assert "malformed JSONB at byte" in str(exc)
            continue
        if decode is jsonb_to_text:
            json.loads(out)  # whatever decodes is valid JSON


@pytest.mark.parametrize(
    ("blob", "reason"),
    [
        (b"", "truncated"),
        (b"\x0d", "reserved element type 13"),
        (b"\x1f\x00", "reserved element type 15"),
        (b"\x13\x31\x00", "trailing bytes"),
        (b"\x03", "bad INT payload"),
        (b"\x23\x30\x31", "bad INT payload"),
        (b"\x33abc", "bad INT payload"),
        (b"\x35\x31\x2e\x2e", "bad FLOAT payload"),
        (b"\x34\x30\x78\x7a", "bad INT5 payload"),
        (b"\x2c\x13\x31", "label of type 3"),
        (b"\x1c\x17", "truncated"),  # object holding one byte that claims a payload
        (b"\x2c\x17\x61", "label without a value"),
        (b"\x17\x22", "needs escaping"),
        (b"\x28\x5c\x71", "invalid escape"),
        (b"\x17\xff", "not valid UTF-8"),
        (b"\xcb\x05\x00", "overruns"),
        (b"\xdb\x00", "header cut short"),
        (b"\x29\x5c\x78", "\\x escape"),
    ],
)
def test_malformed_examples(blob: bytes, reason: str) -> None:
    with pytest.raises(JsonbError, match="malformed JSONB at byte"):
        jsonb_to_value(blob)
    with pytest.raises(JsonbError) as info:
        jsonb_to_text(blob)
    assert reason in info.value.reason


def test_nesting_limit() -> None:
    deep = b"\x00"
    for _ in range(MAX_DEPTH):
        deep = header(ARRAY, len(deep), 4) + deep
    assert jsonb_to_text(deep) == "[" * MAX_DEPTH + "null" + "]" * MAX_DEPTH
    too_deep = header(ARRAY, len(deep), 4) + deep
    with pytest.raises(JsonbError, match="nested deeper"):
        jsonb_to_value(too_deep)


def test_spec_examples_and_legacy_rules() -> None:
    # The five encodings of the number 1 given in the JSONB spec.
    for blob in (b"\x13\x31", b"\xc3\x01\x31", b"\xd3\x00\x01\x31", b"\xe3\x00\x00\x00\x01\x31",
                 b"\xf3\x00\x00\x00\x00\x00\x00\x00\x01\x31"):
        assert jsonb_to_value(blob) == 1 and jsonb_to_text(blob) == "1"
    # TRUE with a payload is read as true by legacy readers (spec 3.2).
    assert jsonb_to_text(b"\x2b\x11\x00") == "[true]"
    assert jsonb_to_value(b"\x2b\x11\x00") == [True]
    # A wider-than-needed header on null is still one element (spec 3.1; SQLite's renderer misreads it).
    assert jsonb_to_text(b"\x2b\xc0\x00") == "[null]"
    # TEXTRAW escaping follows SQLite: short escapes, else \u00xx in lowercase.
    raw = b'a"b\\c\n\x1f\x7f'
    assert jsonb_to_text(bytes([TEXTRAW | 0xC0, len(raw)]) + raw) == '"a\\"b\\\\c\\n\\u001f\x7f"'
    assert jsonb_to_value(b"\x44-0x1") == -1 and jsonb_to_text(b"\x64-0x1ff") == "-511"
    assert jsonb_to_text(b"\xc4\x130x10000000000000000") == "9.0e999"
    assert jsonb_to_value(b"\xc4\x130x10000000000000000") == math.inf
    # A 8-byte size field larger than the blob is reported, not allocated.
    assert not looks_like_jsonb(b"\xfb\xff\xff\xff\xff\xff\xff\xff\xff")
