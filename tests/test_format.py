"""Object kinds, ids, frames and the decoder's error behaviour."""

from __future__ import annotations

import msgpack
import pytest
import zstandard

from crewckpt.backends.memory import MemoryBackend
from crewckpt.errors import DecodeError, IntegrityError
from crewckpt.format import objects as ob
from crewckpt.format.frame import Codec, packed_frame, parse_packed, train_dictionary
from crewckpt.history.objectdb import ObjectDB

BODIES = {
    ob.BLOB: b"x" * 500,
    ob.TREE: ob.encode_tree(ob.OBJECT, {"k": "v" * 300, "n": [1, 2.5, None]}),
    ob.COMMIT: ob.Commit(ob.Link(b"\x01" * 32, ob.TREE), (b"\x02" * 32,), 5, "r", None).encode(),
    ob.DICT: b"\x37\xa4\x30\xec" + b"d" * 200,
    ob.PACK: b"abc" * 100,
}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_every_kind_round_trips_through_a_store(kind: int) -> None:
    db = ObjectDB(MemoryBackend())
    s = db.frame(kind, BODIES[kind])
    with db.backend.transaction() as txn:
        txn.put_many([s], 1)
    assert db.get(s.oid) == (kind, BODIES[kind])


def test_id_independent_of_compression_and_dictionary() -> None:
    samples = [ob.encode_tree(ob.OBJECT, {"event": "task_started", "i": i, "pad": "ab" * (i % 50)})
               for i in range(400)]
    dict_bytes = train_dictionary(samples, 4096)
    dict_id = ob.object_id(ob.DICT, dict_bytes)
    body = samples[123]
    raw = Codec().encode(body, compress=False)
    z = Codec().encode(body)
    zd = Codec(dictionary=(dict_id, dict_bytes)).encode(body)
    assert (raw[0], z[0], zd[0]) == (0, 1, 2)
    for frame in (raw, z, zd):
        back = Codec(dictionary=(dict_id, dict_bytes)).decode(frame)
        assert back == body
    oid = ob.object_id(ob.TREE, body)
    backend = MemoryBackend()
    db = ObjectDB(backend, Codec(load_dict=lambda i: dict_bytes if i == dict_id else b""))
    from crewckpt.backends.base import StoredObject
    for frame in (raw, z, zd):
        assert db.verify(StoredObject(oid, ob.TREE, len(body), frame)) == body


def test_flipped_byte_and_truncation_raise_integrity_error() -> None:
    from crewckpt.backends.base import StoredObject
    db = ObjectDB(MemoryBackend())
    s = db.frame(ob.TREE, BODIES[ob.TREE])
    assert s.frame[0] == 1  # compressed
    for bad in (s.frame[:-3], s.frame[:1] + bytes([s.frame[1] ^ 0xFF]) + s.frame[2:],
                b"\x00" + BODIES[ob.TREE][:-1] + b"\x00", b"", b"\x09abc"):
        with pytest.raises(IntegrityError) as e:
            db.verify(StoredObject(s.oid, ob.TREE, 0, bad))
        assert s.oid.hex() in str(e.value)


def test_packed_frame_round_trip_and_errors() -> None:
    f = packed_frame(b"\xaa" * 32, 300, 5)
    assert parse_packed(f) == (b"\xaa" * 8, 300, 5)
    for bad in (f[:-1], f + b"\x00", b"\x03" + b"\x00" * 8 + b"\xff" * 9, b"\x01"):
        with pytest.raises(DecodeError):
            parse_packed(bad)


def test_pack_members_verify_and_a_damaged_pack_names_the_member() -> None:
    backend = MemoryBackend()
    db = ObjectDB(backend)
    items = [(ob.object_id(ob.BLOB, b), ob.BLOB, b) for b in (b"one" * 30, b"two" * 30, b"three" * 30)]
    objs = db.pack(items)
    with backend.transaction() as txn:
        txn.put_many(objs, 1)
    assert {o: db.get(o)[1] for o, _, _ in items} == {o: b for o, _, b in items}
    pack = objs[0]
    data = bytearray(zstandard.ZstdDecompressor().decompress(pack.frame[1:]))
    data[0] ^= 1
    with backend.transaction() as txn:
        txn.reframe([(pack.oid, b"\x00" + bytes(data))])
    fresh = ObjectDB(backend)
    with pytest.raises(IntegrityError) as e:
        fresh.get(items[1][0])
    assert items[1][0].hex() in str(e.value)


@pytest.mark.parametrize("body", [
    b"", b"\xc1", msgpack.packb([9, {}]), msgpack.packb([0, {1: 2}]), msgpack.packb([0]),
    msgpack.packb([2, [1]]), msgpack.packb([4, ["x"]]), msgpack.packb([5, [1]]),
    msgpack.packb([0, {"a": msgpack.ExtType(7, b"")}]), msgpack.packb([0, {"a": msgpack.ExtType(0, b"x")}]),
    msgpack.packb([0, {"a": msgpack.ExtType(1, b"12a")}]), msgpack.packb([0, {"a": msgpack.ExtType(2, b"\xff")}]),
    b"\x91" * 5000,
])
def test_tree_decoder_rejects_malformed_bodies(body: bytes) -> None:
    with pytest.raises(DecodeError):
        ob.decode_tree(body)


def test_commit_decoder_rejects_wrong_shapes() -> None:
    good = BODIES[ob.COMMIT]
    assert ob.Commit.decode(good).run_id == "r" and ob.Commit.decode(good).version == 2
    for bad in (msgpack.packb([1] * 11), msgpack.packb([2] * 8), msgpack.packb([]), good[:-1],
                msgpack.packb({"a": 1}), msgpack.packb([True] + [None] * 7), msgpack.packb([3] + [None] * 7),
                good[:1] + b"\x01" + good[2:]):
        with pytest.raises(DecodeError):
            ob.Commit.decode(bad)


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(DecodeError):
        ob.object_id(42, b"")
