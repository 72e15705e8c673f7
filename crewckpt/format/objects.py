"""Object kinds, their msgpack encodings and their ids (normative: objects_format.md).

An object is ``(kind, body)``: ``body`` is the uncompressed encoded bytes. Its id is
``BLAKE3-256(kind_name + b" " + ascii(len(body)) + b"\\0" + body)`` (git's header rule, BLAKE3 instead of
SHA-1), so an id never depends on compression, dictionary or backend.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import blake3
import msgpack

from crewckpt.errors import DecodeError

FORMAT_VERSION = 3
"""The highest store format version this code reads and writes: 1, 2 and 3 (objects_format.md, section
'Versioning'). Version 3 adds no object kind: it marks a store that holds documents a version-2 reader would
misread (CrewAI documents with agent references, ``crewckpt.views.document``)."""

NEW_STORE_VERSION = 2
"""The version a new store records; its first commit whose profile needs more (``Profile.store_version``)
raises it in that commit's transaction."""

BLOB, TREE, COMMIT, DICT, PACK = 1, 2, 3, 4, 5
KIND_NAMES: dict[int, bytes] = {BLOB: b"blob", TREE: b"tree", COMMIT: b"commit", DICT: b"dict", PACK: b"pack"}

# tree forms
OBJECT, ARRAY, OBJECT_CHUNKS, ARRAY_CHUNKS, STRING_CHUNKS, VALUE = 0, 1, 2, 3, 4, 5
_FORMS = (OBJECT, ARRAY, OBJECT_CHUNKS, ARRAY_CHUNKS, STRING_CHUNKS, VALUE)

# msgpack extension codes used inside tree bodies
EXT_TREE, EXT_BIGINT, EXT_WTF8, EXT_BLOB_STR = 0, 1, 2, 3

ID_BYTES = 32
MAX_BODY = 1 << 30  # 1 GiB: larger claimed sizes are treated as hostile


def object_id(kind: int, body: bytes) -> bytes:
    """Return the 32-byte BLAKE3 id of an object.

    Args:
        kind: one of BLOB, TREE, COMMIT, DICT, PACK.
        body: the uncompressed encoded body.
    Raises:
        DecodeError: unknown kind.
    """
    name = KIND_NAMES.get(kind)
    if name is None:
        raise DecodeError(f"unknown object kind {kind!r}")
    h = blake3.blake3(name + b" " + str(len(body)).encode("ascii") + b"\0")
    h.update(body)
    return h.digest()


def hex_id(oid: bytes) -> str:
    """32 raw bytes -> 64 lowercase hex characters."""
    return oid.hex()


@dataclasses.dataclass(frozen=True, slots=True)
class Link:
    """A reference from a tree to another object.

    ``kind`` is TREE (the value is what that tree encodes) or BLOB (the value is the blob's bytes decoded as
    UTF-8 with surrogates allowed; inside a STRING_CHUNKS tree: that raw byte piece).
    """

    oid: bytes
    kind: int

    def ext(self) -> msgpack.ExtType:
        return msgpack.ExtType(EXT_TREE if self.kind == TREE else EXT_BLOB_STR, self.oid)


_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1


def pack_int(v: int) -> int | msgpack.ExtType:
    """Ints outside msgpack's range become EXT_BIGINT (signed ASCII decimal). The decimal is ``int.__repr__``'s,
    as json's: an int subclass's own ``__str__`` (an IntEnum's on Python 3.10) would store its name instead."""
    if _INT_MIN <= v <= _INT_MAX:
        return v
    return msgpack.ExtType(EXT_BIGINT, int.__repr__(v).encode("ascii"))


def pack_str(s: str) -> str | msgpack.ExtType:
    """Strings that are not valid UTF-8 (lone surrogates, allowed by JSON escapes) become EXT_WTF8."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return msgpack.ExtType(EXT_WTF8, s.encode("utf-8", "surrogatepass"))


def str_bytes(s: str) -> bytes:
    """The byte form of a string as stored in blobs (UTF-8, lone surrogates encoded as 3 bytes)."""
    return s.encode("utf-8", "surrogatepass")


def bytes_str(b: bytes) -> str:
    """Inverse of :func:`str_bytes`; raises DecodeError on invalid bytes."""
    try:
        return b.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as e:
        raise DecodeError(f"string bytes are not UTF-8: {e.reason}") from None


def _ext_hook(code: int, data: bytes) -> Any:
    if code in (EXT_TREE, EXT_BLOB_STR):
        if len(data) != ID_BYTES:
            raise DecodeError("link with a bad id length")
        return Link(data, TREE if code == EXT_TREE else BLOB)
    if code == EXT_BIGINT:
        try:
            text = data.decode("ascii")
            if not text or len(text) > 100_000 or not text.lstrip("-").isdigit():
                raise ValueError
            return int(text)
        except ValueError:
            raise DecodeError("bad big integer") from None
    if code == EXT_WTF8:
        return bytes_str(data)
    raise DecodeError(f"unknown extension code {code}")


def packb(value: Any) -> bytes:
    """msgpack-encode a tree payload (strings, ints, floats, bools, None, lists, dicts, ExtTypes)."""
    return msgpack.packb(value, use_bin_type=True)


def unpackb(body: bytes) -> Any:
    """Decode msgpack with crewckpt's extension types; raises DecodeError on any malformed input."""
    try:
        return msgpack.unpackb(
            body, raw=False, ext_hook=_ext_hook, strict_map_key=False, use_list=True)
    except DecodeError:
        raise
    except Exception as e:  # msgpack raises several types on hostile input
        raise DecodeError(f"malformed msgpack: {type(e).__name__}") from None


_JSON_LEAVES = frozenset({str, int, float, bool, type(None), Link})


def check_json(payload: Any) -> None:
    """Reject what msgpack can carry but JSON cannot (bin strings, non-string map keys), so a hostile or
    damaged tree can never make ``read`` return a non-JSON value. Iterative: payloads may nest deeply.
    Exact type checks (msgpack builds only plain types): ~1/3 of the unpack time."""
    leaves = _JSON_LEAVES
    stack = [payload]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is list:
            for c in x:
                if type(c) not in leaves:
                    stack.append(c)
        elif t is dict:
            for k, c in x.items():
                if type(k) is not str:
                    raise DecodeError("tree holds a map key that is not a string")
                if type(c) not in leaves:
                    stack.append(c)
        elif t not in leaves:
            raise DecodeError(f"tree holds a {t.__name__}, which is not a JSON value")


def encode_tree(form: int, payload: Any) -> bytes:
    """Tree body: msgpack ``[form, payload]`` (objects_format.md, 'tree')."""
    return packb([form, payload])


def decode_tree(body: bytes) -> tuple[int, Any]:
    """Parse a tree body into ``(form, payload)``; payload still holds :class:`Link` placeholders.

    Raises:
        DecodeError: not a valid tree body.
    """
    v = unpackb(body)
    if not isinstance(v, list) or len(v) != 2 or v[0] not in _FORMS or isinstance(v[0], bool):
        raise DecodeError("tree body is not [form, payload]")
    form, payload = v
    check_json(payload)
    if form == VALUE:
        if isinstance(payload, (dict, list, Link)):
            raise DecodeError("value tree holds a container or link")
    elif form == OBJECT:
        if not isinstance(payload, dict) or not all(isinstance(k, str) for k in payload):
            raise DecodeError("object tree payload is not a map with string keys")
    elif not isinstance(payload, list):
        raise DecodeError("tree payload is not an array")
    elif form in (OBJECT_CHUNKS, ARRAY_CHUNKS):
        if not all(isinstance(x, Link) and x.kind == TREE for x in payload):
            raise DecodeError("chunk list holds a non-tree entry")
    elif form == STRING_CHUNKS:
        if not all(isinstance(x, Link) for x in payload):
            raise DecodeError("string chunk list holds a non-link entry")
    return form, payload


@dataclasses.dataclass(frozen=True, slots=True)
class V1Summary:
    """The summary slot of a format-1 commit body (objects_format.md 5.3; format 2 has none: a summary is a
    commit-index cache there). Fixed layout ``[entities, tasks_done, tasks_total, event_count,
    logical_bytes]``: entities ``[[entity_type, name], ...]``, ints. Kept to decode and re-encode format-1
    bodies exactly; :meth:`as_map` gives the generic summary map the store lists."""

    entities: tuple[tuple[str, str], ...] = ()
    tasks_done: int = 0
    tasks_total: int = 0
    event_count: int = 0
    logical_bytes: int = 0

    def encode(self) -> list[Any]:
        return [[list(e) for e in self.entities], self.tasks_done, self.tasks_total, self.event_count,
                self.logical_bytes]

    def as_map(self) -> dict[str, Any]:
        """The slot as a summary map, keys named as in format 1 (in slot order)."""
        return {"entities": [list(e) for e in self.entities], "tasks_done": self.tasks_done,
                "tasks_total": self.tasks_total, "event_count": self.event_count,
                "logical_bytes": self.logical_bytes}

    @classmethod
    def decode(cls, v: Any) -> V1Summary:
        try:
            ents, done, total, events, size = v
            entities = tuple((str(t), str(n)) for t, n in ents)
            for n in (done, total, events, size):
                if not isinstance(n, int) or isinstance(n, bool):
                    raise TypeError
            return cls(entities, done, total, events, size)
        except (TypeError, ValueError):
            raise DecodeError("bad commit summary") from None


COMMIT_FORMAT = 2
"""Commit format this code writes (objects_format.md, 'Commits'); it reads formats 1 and 2."""


@dataclasses.dataclass(frozen=True, slots=True)
class Commit:
    """A commit object (objects_format.md, 'Commits'): only what is true in every store.

    tree: root tree/blob link of the snapshot; parents: parent commit ids (raw 32 bytes each); time_ns: UTC
    wall time in nanoseconds; run_id: writer/lineage id; trigger: what caused the checkpoint (a CrewAI event
    type) or None; meta_json: metadata as compact JSON text or None; alias: foreign id (a CrewAI checkpoint
    id) or None. Local order (seq), the owning branch and the listing summary are not part of a commit: they
    live in the store's commit index.

    ``version`` is the commit format of the body (2 for new commits). A format-1 body also carried the
    writing store's sequence number, branch name and summary; they decode into ``v1_seq``, ``v1_branch``
    and ``v1_summary`` only so :meth:`encode` gives back the exact body (and so the id). Readers never use
    ``v1_seq`` or ``v1_branch`` for identity or order.
    """

    tree: Link
    parents: tuple[bytes, ...]
    time_ns: int
    run_id: str
    trigger: str | None
    meta_json: str | None = None
    alias: str | None = None
    version: int = COMMIT_FORMAT
    v1_seq: int = 0
    v1_branch: str = ""
    v1_summary: V1Summary | None = None

    def encode(self) -> bytes:
        """The commit body in its ``version``'s layout. Raises DecodeError for a version it cannot write, or
        for fields :meth:`decode` would refuse (a writer must never store a commit no reader can read)."""
        _check_commit(self.tree, list(self.parents), self.time_ns, self.run_id, self.trigger, self.meta_json,
                      self.alias)
        if self.version == 2:
            return packb([2, self.tree.ext(), list(self.parents), self.time_ns, self.run_id, self.trigger,
                          self.meta_json, self.alias])
        if self.version == 1:
            return packb([1, self.tree.ext(), list(self.parents), self.time_ns, self.v1_seq, self.v1_branch,
                          self.run_id, self.trigger, (self.v1_summary or V1Summary()).encode(), self.meta_json,
                          self.alias])
        raise DecodeError(f"cannot encode commit format {self.version!r}")

    @classmethod
    def decode(cls, body: bytes) -> Commit:
        """Decode a format-1 (11 fields) or format-2 (8 fields) commit body.

        Raises:
            DecodeError: anything but a valid commit body of a known format.
        """
        v = unpackb(body)
        if not isinstance(v, list) or not v:
            raise DecodeError("commit body is not an array")
        ver = v[0]
        if ver == 2 and not isinstance(ver, bool):
            if len(v) != 8:
                raise DecodeError("format-2 commit body is not an 8-field array")
            _, tree, parents, t, run_id, trigger, meta, alias = v
            _check_commit(tree, parents, t, run_id, trigger, meta, alias)
            return cls(tree, tuple(parents), t, run_id, trigger, meta, alias)
        if ver == 1 and not isinstance(ver, bool):
            if len(v) != 11:
                raise DecodeError("format-1 commit body is not an 11-field array")
            _, tree, parents, t, seq, branch, run_id, trigger, summary, meta, alias = v
            _check_commit(tree, parents, t, run_id, trigger, meta, alias)
            if not isinstance(seq, int) or isinstance(seq, bool) or not isinstance(branch, str):
                raise DecodeError("commit fields have wrong types")
            return cls(tree, tuple(parents), t, run_id, trigger, meta, alias, 1, seq, branch,
                       V1Summary.decode(summary))
        if isinstance(ver, int) and not isinstance(ver, bool) and ver > COMMIT_FORMAT:
            raise DecodeError(f"commit format {ver} is newer than this crewckpt understands; upgrade crewckpt")
        raise DecodeError("commit body has no known commit format")


def _check_commit(tree: Any, parents: Any, t: Any, run_id: Any, trigger: Any, meta: Any, alias: Any) -> None:
    """The field types both commit formats share; raises DecodeError."""
    ok = (
        isinstance(tree, Link) and isinstance(parents, list)
        and all(isinstance(p, bytes) and len(p) == ID_BYTES for p in parents)
        and isinstance(t, int) and not isinstance(t, bool) and isinstance(run_id, str)
        and (trigger is None or isinstance(trigger, str))
        and (meta is None or isinstance(meta, str)) and (alias is None or isinstance(alias, str))
    )
    if not ok:
        raise DecodeError("commit fields have wrong types")
