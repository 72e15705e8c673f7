"""Verified object access over a backend: frames in, (kind, body) out, every read re-hashed.

This is the only place frames are decoded, so "every read of an object verifies its hash" holds by
construction (objects_format.md, 'Reading').
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable
from typing import Any

from crewckpt.backends.base import Backend, Reader, StoredObject
from crewckpt.errors import DecodeError, IntegrityError, MissingObject
from crewckpt.format import objects as ob
from crewckpt.format.frame import Codec

TREE_CACHE_ITEMS = 20_000


class ObjectDB:
    """Reads and encodes objects for one open store.

    Args:
        backend: where frames live.
        codec: compression policy; None builds a default one that loads dictionaries from the backend.
    """

    def __init__(self, backend: Backend, codec: Codec | None = None) -> None:
        self.backend = backend
        self.codec = codec or Codec(load_dict=self._load_dict)
        self._trees: collections.OrderedDict[bytes, tuple[int, Any]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def _load_dict(self, dict_id: bytes) -> bytes:
        kind, body = self.get(dict_id)
        if kind != ob.DICT:
            raise DecodeError(f"frame names {dict_id.hex()} as its dictionary, but that is not a dict object")
        return body

    def frame(self, kind: int, body: bytes) -> StoredObject:
        """Encode one object for storage: ``StoredObject(id, kind, len(body), frame)``."""
        return StoredObject(ob.object_id(kind, body), kind, len(body), self.codec.encode(body))

    def verify(self, stored: StoredObject) -> bytes:
        """Decode a stored object and check its hash; returns the body.

        Raises:
            IntegrityError: the frame does not decode, or decodes to bytes whose id differs.
        """
        try:
            body = self.codec.decode(stored.frame)
            if stored.kind not in ob.KIND_NAMES:
                raise DecodeError(f"unknown kind {stored.kind}")
            oid = ob.object_id(stored.kind, body)
        except DecodeError as e:
            raise IntegrityError(stored.oid.hex(), str(e)) from None
        if oid != stored.oid:
            raise IntegrityError(stored.oid.hex(), "content hash does not match its id")
        return body

    def get(self, oid: bytes, reader: Reader | None = None) -> tuple[int, bytes]:
        """``(kind, body)`` of one object. Raises MissingObject or IntegrityError."""
        got = (reader or self.backend).get_many([oid])
        if oid not in got:
            raise MissingObject(oid.hex())
        s = got[oid]
        return s.kind, self.verify(s)

    def get_many(self, oids: Iterable[bytes], reader: Reader | None = None) -> dict[bytes, tuple[int, bytes]]:
        """Verified ``oid -> (kind, body)`` for the ids found; missing ids are absent from the result."""
        return {o: (s.kind, self.verify(s)) for o, s in (reader or self.backend).get_many(oids).items()}

    def trees(self, oids: Iterable[bytes], reader: Reader | None = None) -> dict[bytes, tuple[int, Any]]:
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
            got = self.get_many(todo, reader)
            for o in todo:
                if o not in got:
                    raise MissingObject(o.hex())
                kind, body = got[o]
                if kind != ob.TREE:
                    raise IntegrityError(o.hex(), f"expected a tree, found kind {kind}")
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

    def commit(self, cid: bytes, reader: Reader | None = None) -> ob.Commit:
        """Decoded commit object. Raises MissingObject, IntegrityError."""
        kind, body = self.get(cid, reader)
        if kind != ob.COMMIT:
            raise IntegrityError(cid.hex(), f"expected a commit, found kind {kind}")
        try:
            return ob.Commit.decode(body)
        except DecodeError as e:
            raise IntegrityError(cid.hex(), str(e)) from None

    def blobs(self, oids: Iterable[bytes], reader: Reader | None = None) -> dict[bytes, bytes]:
        """Verified blob bodies. Raises MissingObject / IntegrityError."""
        want = list(dict.fromkeys(oids))
        got = self.get_many(want, reader)
        out = {}
        for o in want:
            if o not in got:
                raise MissingObject(o.hex())
            kind, body = got[o]
            if kind != ob.BLOB:
                raise IntegrityError(o.hex(), f"expected a blob, found kind {kind}")
            out[o] = body
        return out
