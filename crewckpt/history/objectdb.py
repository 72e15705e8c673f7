"""Verified object access over a backend: frames in, (kind, body) out, every read re-hashed.

This is the only place frames are decoded, so "every read of an object verifies its hash" holds by
construction (objects_format.md, 'Reading').
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable
from typing import Any

from crewckpt.backends.base import ObjectStore, StoredObject
from crewckpt.errors import DecodeError, IntegrityError, MissingObject
from crewckpt.format import objects as ob
from crewckpt.format.frame import Codec, packed_frame, parse_packed
from crewckpt.history.limits import ReadBudget

TREE_CACHE_ITEMS = 20_000
PACK_CACHE_BYTES = 64 * 1024 * 1024
PACK_GONE_RETRIES = 8  # reads of one batch while concurrent repacks keep moving a member (each move is progress)


class ObjectDB:
    """Reads and encodes objects for one open store.

    Args:
        backend: the object store where frames live (any backend).
        codec: compression policy; None builds a default one that loads dictionaries from the backend.
    """

    def __init__(self, backend: ObjectStore, codec: Codec | None = None) -> None:
        self.backend = backend
        self.codec = codec or Codec(load_dict=self._load_dict)
        self._trees: collections.OrderedDict[bytes, tuple[int, Any]] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._pack_cache: collections.OrderedDict[bytes, list[bytes]] = collections.OrderedDict()
        self._pack_bytes = 0

    def _load_dict(self, dict_id: bytes) -> bytes:
        kind, body = self.get(dict_id)
        if kind != ob.DICT:
            raise DecodeError(f"frame names {dict_id.hex()} as its dictionary, but that is not a dict object")
        return body

    def frame(self, kind: int, body: bytes) -> StoredObject:
        """Encode one object for storage: ``StoredObject(id, kind, len(body), frame)``."""
        return StoredObject(ob.object_id(kind, body), kind, len(body), self.codec.encode(body))

    def pack(self, objs: list[tuple[bytes, int, bytes]], level: int | None = None) -> list[StoredObject]:
        """Store ``(oid, kind, body)`` objects inside one PACK object compressed as a whole (cross-object
        redundancy: successive versions of a task or agent compress against each other, as in git packs).

        Returns the pack object followed by one PACKED-frame member per input (objects_format.md, 'Packs').
        """
        body = b"".join(b for _, _, b in objs)
        pack_id = ob.object_id(ob.PACK, body)
        out = [StoredObject(pack_id, ob.PACK, len(body), self.codec.encode(body, level=level))]
        off = 0
        for oid, kind, b in objs:
            out.append(StoredObject(oid, kind, len(b), packed_frame(pack_id, off, len(b))))
            off += len(b)
        return out

    def verify(self, stored: StoredObject, reader: ObjectStore | None = None, budget: ReadBudget | None = None) -> bytes:
        """Decode a stored object (through its pack if packed) and check its hash; returns the body.

        The frame is decoded to exactly its declared size (the ``size`` column) and no more; ``budget``, when
        given, is charged that size first (DocumentTooLarge: nothing was decompressed).

        Raises:
            IntegrityError: the frame does not decode, or decodes to bytes whose id differs.
            MissingObject: its pack is gone (a ``_PackGone``; get_many re-reads once, then raises IntegrityError).
        """
        try:
            if stored.kind not in ob.KIND_NAMES or isinstance(stored.kind, bool):
                raise DecodeError(f"unknown kind {stored.kind!r}")
            if not isinstance(stored.size, int):
                raise DecodeError(f"its size column holds {type(stored.size).__name__} {str(stored.size)[:20]!r}")
            if stored.frame[:1] == b"\x03":
                return self._unpack(stored, reader, budget)
            if budget is not None:
                budget.charge_object(stored.oid, stored.size)
            body = self.codec.decode(stored.frame, stored.size)
            oid = ob.object_id(stored.kind, body)
        except DecodeError as e:
            raise IntegrityError(stored.oid.hex(), str(e)) from None
        if oid != stored.oid:
            raise IntegrityError(stored.oid.hex(), "content hash does not match its id")
        return body

    def verify_read(self, stored: StoredObject, reader: ObjectStore | None = None,
                    budget: ReadBudget | None = None) -> bytes | None:
        """:meth:`verify` for a frame the caller read itself (fsck reads frames to report per object): when
        its pack went meanwhile (a merge or repack moved the object, backends.md RD4) the object is read again
        through :meth:`get_many`. Returns the body, or None when the object is gone now.

        Raises:
            IntegrityError: it is corrupt, or its frame keeps naming a pack that is not in the store.
            DocumentTooLarge: over ``budget``.
        """
        try:
            return self.verify(stored, reader, budget)
        except _PackGone:
            got = self.get_many([stored.oid], reader, budget)
        return got[stored.oid][1] if stored.oid in got else None

    def _unpack(self, stored: StoredObject, reader: ObjectStore | None, budget: ReadBudget | None = None) -> bytes:
        key, off, ln = parse_packed(stored.frame)
        if ln != stored.size:
            raise DecodeError(f"packed frame holds {ln} bytes but its size says {stored.size}")
        try:
            packs = self._packs(key, reader, budget)
        except IntegrityError as e:
            raise IntegrityError(stored.oid.hex(), f"its pack {e.oid} is corrupt") from None
        if not packs:
            raise _PackGone(stored.oid, key)
        for body in packs:
            piece = body[off:off + ln]
            if len(piece) == ln and ob.object_id(stored.kind, piece) == stored.oid:
                return piece
        raise IntegrityError(stored.oid.hex(), f"no slice of pack {key.hex()}.. hashes to it")

    def _packs(self, key: bytes, reader: ObjectStore | None, budget: ReadBudget | None = None) -> list[bytes]:
        """Verified, decompressed bodies of the packs whose id starts with ``key`` (LRU-cached by bytes).

        Raises:
            IntegrityError: a candidate pack is corrupt (named by its full id).
        """
        with self._lock:
            hit = self._pack_cache.get(key)
            if hit is not None:
                self._pack_cache.move_to_end(key)
                return hit
        out = []
        for s in (reader or self.backend).get_prefix(key, ob.PACK):
            if s.frame[:1] == b"\x03":
                raise IntegrityError(s.oid.hex(), "a pack cannot itself be packed")
            out.append(self.verify(s, reader, budget))
        with self._lock:
            self._pack_cache[key] = out
            self._pack_bytes += sum(len(b) for b in out)
            while self._pack_bytes > PACK_CACHE_BYTES and len(self._pack_cache) > 1:
                _, old = self._pack_cache.popitem(last=False)
                self._pack_bytes -= sum(len(b) for b in old)
        return out

    def get(self, oid: bytes, reader: ObjectStore | None = None,
            budget: ReadBudget | None = None) -> tuple[int, bytes]:
        """``(kind, body)`` of one object. Raises MissingObject or IntegrityError (DocumentTooLarge over
        ``budget``)."""
        got = self.get_many([oid], reader, budget)
        if oid not in got:
            raise MissingObject(oid.hex())
        return got[oid]

    def get_many(self, oids: Iterable[bytes], reader: ObjectStore | None = None,
                 budget: ReadBudget | Callable[[bytes], ReadBudget] | None = None) -> dict[bytes, tuple[int, bytes]]:
        """Verified ``oid -> (kind, body)`` for the ids found; missing ids are absent from the result.

        ``budget``: the declared sizes are charged to it before decompressing (DocumentTooLarge): one budget
        for the whole batch, or a function giving each object id its own.

        A pack that vanished between reading a frame and reading the pack means a merge or gc repacked
        concurrently (it reframed the member, then dropped the pack): the frames are read again, as long as
        the member's frame changed since the previous read (backends.md, 'Reading while packs merge'); what
        the abandoned attempt charged to ``budget`` is given back. Every reader of frames goes through here
        (a push reading its store while that store's writer merges packs hit this)."""
        r = reader or self.backend
        ids = list(oids)
        seen: dict[bytes, bytes] = {}  # member -> the frame whose pack was missing
        err = _PackGone(b"", b"")
        for _ in range(PACK_GONE_RETRIES):
            spent = budget.used_bytes if isinstance(budget, ReadBudget) else 0
            try:
                got = r.get_many(ids)
                for o, s in got.items():  # a hostile or broken backend must not answer X with object Y
                    if s.oid != o:
                        raise IntegrityError(o.hex(), f"the store answered with object {s.oid.hex()[:12]}.. "
                                                      "instead; run ckpt fsck")
                if budget is None or isinstance(budget, ReadBudget):
                    return {o: (s.kind, self.verify(s, r, budget)) for o, s in got.items()}
                return {o: (s.kind, self.verify(s, r, budget(o))) for o, s in got.items()}
            except _PackGone as e:
                if isinstance(budget, ReadBudget):
                    budget.used_bytes = spent  # the retry charges the same objects again
                frame = got[e.member].frame if e.member in got else b""
                if seen.get(e.member) == frame:  # the same frame twice: no repack moved it; damaged or lost
                    break
                seen[e.member] = frame
                err = e
        raise IntegrityError(err.member.hex(), f"its frame names pack {err.key.hex()}.., which is not in the "
                                               f"store") from None

    def trees(self, oids: Iterable[bytes], reader: ObjectStore | None = None,
              budget: ReadBudget | None = None) -> dict[bytes, tuple[int, Any]]:
        """Decoded trees ``oid -> (form, payload)`` (cached; callers must not mutate payloads).

        Raises:
            MissingObject: one is absent. IntegrityError: one is corrupt or is not a tree.
        """
        want = list(dict.fromkeys(oids))
        out: dict[bytes, tuple[int, Any]] = {}
        with self._lock:
            for o in want:
                t = self._trees.get(o)
                if t is not None:
                    out[o] = t
        todo = [o for o in want if o not in out]
        if todo:
            for o, body in self._bodies(todo, ob.TREE, reader, budget).items():
                try:
                    out[o] = ob.decode_tree(body)
                except DecodeError as e:
                    raise IntegrityError(o.hex(), str(e)) from None
            with self._lock:
                for o in todo:
                    self._trees[o] = out[o]
                while len(self._trees) > TREE_CACHE_ITEMS:
                    self._trees.popitem(last=False)
        return out

    def commit(self, cid: bytes, reader: ObjectStore | None = None,
               budget: ReadBudget | None = None) -> ob.Commit:
        """Decoded commit object. Raises MissingObject, IntegrityError (DocumentTooLarge over ``budget``)."""
        kind, body = self.get(cid, reader, budget)
        return decode_commit(cid, kind, body)

    def blobs(self, oids: Iterable[bytes], reader: ObjectStore | None = None,
              budget: ReadBudget | None = None) -> dict[bytes, bytes]:
        """Verified blob bodies. Raises MissingObject / IntegrityError (DocumentTooLarge over ``budget``)."""
        return self._bodies(list(dict.fromkeys(oids)), ob.BLOB, reader, budget)

    def _bodies(self, want: list[bytes], kind: int, reader: ObjectStore | None,
                budget: ReadBudget | None = None) -> dict[bytes, bytes]:
        """Verified bodies of ``want``, every one present and of ``kind`` (else MissingObject/IntegrityError)."""
        got = self.get_many(want, reader, budget)
        out = {}
        for o in want:
            if o not in got:
                raise MissingObject(o.hex())
            k, body = got[o]
            if k != kind:
                raise IntegrityError(o.hex(), f"expected a {ob.KIND_NAMES[kind].decode()}, found kind {k}")
            out[o] = body
        return out


class _PackGone(MissingObject):
    """A packed frame names a pack that is not (or no longer) in the store: ``member`` is the object whose
    frame it is, ``key`` the 8-byte pack id prefix."""

    def __init__(self, member: bytes, key: bytes) -> None:
        self.member, self.key = member, key
        super().__init__(key.hex())


def decode_commit(cid: bytes, kind: int, body: bytes) -> ob.Commit:
    """The commit in a verified ``(kind, body)`` of object ``cid``. Raises IntegrityError (not a commit, or
    undecodable)."""
    if kind != ob.COMMIT:
        raise IntegrityError(cid.hex(), f"expected a commit, found kind {kind}")
    try:
        return ob.Commit.decode(body)
    except DecodeError as e:
        raise IntegrityError(cid.hex(), str(e)) from None
