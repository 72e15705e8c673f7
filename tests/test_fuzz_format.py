"""Hostile input to the object layer (issue 8, item 5): frame decoder, object decoders, verified reads.

Every input either decodes or raises the documented error (DecodeError for format functions, IntegrityError
or MissingObject for store reads); never another exception, never a hang, never a value that is not JSON.
"""

from __future__ import annotations

import math
import time
from typing import Any

import msgpack
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from crewckpt.backends.base import StoredObject
from crewckpt.errors import DecodeError, IntegrityError, MissingObject
from crewckpt.format import objects as ob
from crewckpt.format.frame import Codec, packed_frame, parse_packed
from crewckpt.history.store import Store

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_codec = Codec()
_real_bodies = [ob.encode_tree(ob.OBJECT, {"a": 1, "b": [1, 2, "x" * 100]}),
                ob.Commit(ob.Link(b"\1" * 32, ob.TREE), (b"\2" * 32,), 1, "r", None).encode(),
                ob.Commit(ob.Link(b"\1" * 32, ob.TREE), (b"\2" * 32,), 1, "r", None, version=1, v1_seq=2,
                          v1_branch="main", v1_summary=ob.V1Summary()).encode()]
_real_frames = [_codec.encode(b) for b in _real_bodies] + [packed_frame(b"\3" * 32, 5, 70)]


def _mutations() -> st.SearchStrategy[bytes]:
    """Real frames/bodies with bytes flipped, cut or appended, plus plain random bytes."""
    base = st.sampled_from(_real_frames + _real_bodies)

    def mutate(b: bytes, data: st.DataObject) -> bytes:
        out = bytearray(b)
        for _ in range(data.draw(st.integers(0, 4))):
            op = data.draw(st.sampled_from(["flip", "cut", "add"]))
            if op == "flip" and out:
                i = data.draw(st.integers(0, len(out) - 1))
                out[i] ^= data.draw(st.integers(1, 255))
            elif op == "cut" and out:
                del out[data.draw(st.integers(0, len(out) - 1)):]
            else:
                out += data.draw(st.binary(max_size=16))
        return bytes(out)

    return st.one_of(st.binary(max_size=200), st.builds(lambda b, d: mutate(b, d), base, st.data()))


@FUZZ
@given(_mutations())
def test_frame_decode_returns_bytes_or_decode_error(frame: bytes) -> None:
    try:
        assert isinstance(_codec.decode(frame), bytes)
    except DecodeError:
        pass


@FUZZ
@given(_mutations())
def test_parse_packed_returns_a_triple_or_decode_error(frame: bytes) -> None:
    try:
        key, off, ln = parse_packed(frame)
        assert len(key) == 8 and off >= 0 and ln >= 0
    except DecodeError:
        pass


def _is_json(v: Any) -> bool:
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if not all(isinstance(k, str) for k in x):
                return False
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, float):
            if math.isnan(x) or math.isinf(x):
                return True  # JSON text cannot hold them, Python's json module does (CrewAI uses it)
        elif not (x is None or isinstance(x, (bool, int, str))):
            return False
    return True


@FUZZ
@given(_mutations())
def test_object_decoders_accept_or_raise_decode_error(body: bytes) -> None:
    for fn in (ob.unpackb, ob.decode_tree, ob.Commit.decode):
        try:
            fn(body)
        except DecodeError:
            pass


@FUZZ
@given(_mutations(), st.sampled_from(sorted(ob.KIND_NAMES) + [0, 9]))
def test_verify_of_a_hostile_stored_object_raises_integrity_error(frame: bytes, kind: int) -> None:
    store = Store.memory()
    oid = b"\7" * 32
    try:
        store.objects.verify(StoredObject(oid, kind, len(frame), frame))
        raise AssertionError("a hostile frame verified against an arbitrary id")
    except (IntegrityError, MissingObject):
        pass


# -- hostile object graphs with correct hashes ----------------------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 64 - 1), st.floats(allow_nan=False),
                     st.text(max_size=8), st.binary(max_size=4))


def _payload(links: list[msgpack.ExtType]) -> st.SearchStrategy[Any]:
    leaf = st.one_of(_scalars, st.sampled_from(links)) if links else _scalars
    return st.recursive(leaf, lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers(0, 3)), kids, max_size=4)), max_leaves=12)


@st.composite
def hostile_graph(draw: st.DrawFn) -> tuple[list[tuple[int, bytes]], bytes]:
    """Up to 6 objects, each a msgpack body that may link (with the right ids) to earlier ones; the last one is
    the root a commit points at. Bodies are often *not* valid trees: the point is what the reader does."""
    objs: list[tuple[int, bytes]] = []
    links: list[msgpack.ExtType] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from([ob.TREE, ob.TREE, ob.TREE, ob.BLOB]))
        if kind == ob.BLOB:
            body = draw(st.binary(max_size=20))
        else:
            form = draw(st.one_of(st.sampled_from([ob.OBJECT, ob.ARRAY, ob.VALUE]), st.integers(-1, 7)))
            body = msgpack.packb([form, draw(_payload(links))], use_bin_type=True) if draw(st.booleans()) \
                else msgpack.packb(draw(_payload(links)), use_bin_type=True)
        oid = ob.object_id(kind, body)
        objs.append((kind, body))
        code = draw(st.sampled_from([ob.EXT_TREE, ob.EXT_BLOB_STR]))  # sometimes the wrong kind on purpose
        links.append(msgpack.ExtType(code, oid))
    root_kind, root_body = objs[-1]
    return objs, ob.object_id(root_kind, root_body)


def _one(payload: Any) -> tuple[list[tuple[int, bytes]], bytes]:
    body = msgpack.packb(payload, use_bin_type=True)
    return [(ob.TREE, body)], ob.object_id(ob.TREE, body)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_graph(), st.booleans())
@example(_one([ob.VALUE, b"bin"]), True)  # msgpack bin is not JSON: read once returned bytes
@example(_one([ob.OBJECT, {"a": {1: 2}}]), True)  # non-string key below the top level
@example(_one([ob.ARRAY, [b"x", {2: 3}]]), True)
def test_reading_a_hostile_graph_gives_json_or_a_store_error(graph: tuple[list[tuple[int, bytes]], bytes],
                                                              root_is_tree: bool) -> None:
    objs, root = graph
    store = Store.memory()
    stored = [store.objects.frame(k, b) for k, b in objs]
    c = ob.Commit(ob.Link(root, ob.TREE if root_is_tree else ob.BLOB), (), 1, "r", None)
    cobj = store.objects.frame(ob.COMMIT, c.encode())
    with store.backend.transaction() as txn:
        txn.put_many([*stored, cobj], 1)
        txn.set_ref_if_equals("refs/heads/main", None, cobj.oid)
    t0 = time.process_time()  # CPU time: a loaded machine slows the wall clock, not the work done
    try:
        v = store.read(cobj.oid.hex())
    except (IntegrityError, MissingObject):
        return
    finally:
        assert time.process_time() - t0 < 5
    assert _is_json(v), f"read returned a non-JSON value: {v!r}"
    rep = store.fsck(full=True)
    assert rep.ok, rep
