"""Split a JSON document into objects and assemble it back (objects_format.md, 'Snapshots').

``assemble(split(doc)) == doc`` for every JSON value Python's json module produces: dict key order, every
string (lone surrogates included), ints of any size, floats (-0.0, 1e308, 5e-324), empty containers, and
nesting up to MAX_DEPTH (255) levels, what a read accepts (both directions are iterative). A split refuses a
deeper value (DocumentTooLarge) and a value that contains itself (ValueError), hints included.

Writer policy (v1; not canonical: a reader accepts any valid tree graph):

* scalars and containers whose encoded tree body is <= INLINE_MAX bytes stay inline in their parent; a
  container nesting deeper than MAX_INLINE_DEPTH inline levels becomes its own tree (msgpack's C stacks);
* strings over INLINE_MAX bytes become blobs; over STR_CDC_MIN bytes they are cut with FastCDC (avg 4 KiB)
  into blobs under a STRING_CHUNKS tree;
* containers with more than CHUNK_ENTRIES entries are cut into leaf trees at content-defined boundaries: after
  an entry whose hash (of its key for objects, of its encoded value for arrays) is 0 mod CHUNK_ENTRIES/2
  (prolly trees, as Dolt does), so appends and edits rewrite only the touched leaf and the path to the root;
  link lists longer than CHUNK_ENTRIES are cut again at boundaries picked by the child ids.

Caching (not canonical, per writer): the BLAKE3 digest of a container's msgpack bytes -> its finished
representation, and large strings -> their link, so unchanged parts of the next checkpoint are neither
walked nor hashed again. Each entry serves only the place it was made for (plain, under a split-hint key, a
Parts piece): ids never depend on what the caches hold (tests/test_splitter_determinism.py).
"""

from __future__ import annotations

import collections
import functools
import math
import sys
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import blake3
import msgpack
import orjson

from crewckpt.errors import DecodeError, DocumentTooLarge, IntegrityError
from crewckpt.format import objects as ob
from crewckpt.history.limits import MAX_DEPTH, ReadBudget

INLINE_MAX = 8192
MAX_INLINE_DEPTH = 64
STR_CDC_MIN = 16 * 1024
CHUNK_ENTRIES = 64
LEAF_BYTES = 16384
SEPARATE_MIN = 256  # bytes: tinier containers stay inline anyway (a link costs 35)
_MASK = CHUNK_ENTRIES // 2 - 1
_FORCE_CUT = 8 * CHUNK_ENTRIES
CACHE_BYTES = 12 * 1024 * 1024  # a Splitter's container cache (+ a quarter for long strings, an eighth for
# split-hint strings): its memory bound, counting each entry's key, value and ENTRY_BYTES (issue 13: a 100-task
# CrewAI run held ~40 MB in these caches when only keys counted against 32 MiB; 12 MiB costs no CPU there)
ENTRY_BYTES = 150  # per cache entry: the OrderedDict node and the key and value objects' headers

_PENDING = object()
_JOINED = 16  # added to a piece's form: a piece of a joined Parts value (forms are below 16)
_SCALARS = (type(None), bool, float)
_DEEP_SKIP = 400  # msgpack-python packs at most 511 levels
_KEY_DEPTH = 16  # a container under this many keyed containers gets no cache key: each key packs the whole
# subtree, so a hostile chain of one-key objects would pack (and hold) its bottom once per level; CrewAI
# documents nest about 10 keyed levels
_KEY_CHARS = 256  # object keys up to this length keep their packed form between splits (Splitter._keys)
# A value's representation depends on its place (objects_format.md 4.1): PLAIN, OWN (under a split-hint key: a
# container over SEPARATE_MIN is its own tree, a string a blob) or LEAF (a piece of a Parts value: its own tree
# whatever its size). Every cache entry is made for one place and serves only that place, so an id never depends
# on where the writer met the same value before.
_PLAIN, _OWN, _LEAF = 0, 1, 2
_PLACE_TAG = (b"", b"\x01", b"\x02")  # prefixed to a container cache key (msgpack keys start at 0x80 or above)


@functools.cache
def _cdc() -> Any:
    """FastCDC 2020 (pyfastcdc): min 1 KiB, avg 4 KiB, max 16 KiB; loaded on first long string."""
    import pyfastcdc
    return pyfastcdc.FastCDC(avg_size=4096)


def _map_hdr(n: int) -> bytes:
    return bytes([0x80 | n]) if n < 16 else (b"\xde" + n.to_bytes(2, "big") if n < 65536 else b"\xdf" + n.to_bytes(4, "big"))


def _arr_hdr(n: int) -> bytes:
    return bytes([0x90 | n]) if n < 16 else (b"\xdc" + n.to_bytes(2, "big") if n < 65536 else b"\xdd" + n.to_bytes(4, "big"))


def _ext(code: int, oid: bytes) -> bytes:
    """msgpack ext 8 of a 32-byte id: the packed form of a link."""
    return b"\xc7\x20" + bytes([code]) + oid


def _tree_body(form: int, packed_payload: bytes) -> bytes:
    """``msgpack([form, payload])`` from the payload's packed bytes (forms are positive fixints)."""
    return b"\x92" + bytes([form]) + packed_payload


def _is_link(rep: bytes) -> bool:
    """``rep`` is a packed link (the cheap test of :func:`_as_link`)."""
    return len(rep) == 35 and rep[:2] == b"\xc7\x20" and rep[2] in (ob.EXT_TREE, ob.EXT_BLOB_STR)


def _as_link(rep: bytes) -> ob.Link | None:
    if len(rep) == 35 and rep[:2] == b"\xc7\x20" and rep[2] in (ob.EXT_TREE, ob.EXT_BLOB_STR):
        return ob.Link(rep[3:], ob.TREE if rep[2] == ob.EXT_TREE else ob.BLOB)
    return None


class _Cache:
    """Bounded LRU: key -> representation (bytes, or (bytes, height, depth)), at most ``limit`` bytes counting every
    entry's key length (bytes, or a string's memory), representation length and ENTRY_BYTES."""

    def __init__(self, limit: int) -> None:
        self.d: collections.OrderedDict[Any, Any] = collections.OrderedDict()
        self.size = 0
        self.limit = limit

    def get(self, k: Any) -> Any:
        v = self.d.get(k)
        if v is not None:
            self.d.move_to_end(k)
        return v

    @staticmethod
    def _bytes(k: Any, v: Any) -> int:
        # a str key counts its memory (1, 2 or 4 bytes a character), not its length; v: rep, or (rep, height, depth)
        size = len(k) if k.__class__ is bytes or (k.__class__ is str and k.isascii()) else sys.getsizeof(k)
        return size + len(v[0] if isinstance(v, tuple) else v) + ENTRY_BYTES

    def put(self, k: Any, v: Any) -> None:
        was = self.d.get(k)
        if was is not None:
            self.size -= self._bytes(k, was)
        self.size += self._bytes(k, v)
        self.d[k] = v
        while self.size > self.limit and self.d:
            old, ov = self.d.popitem(last=False)
            self.size -= self._bytes(old, ov)

    def clear(self) -> None:
        self.d.clear()
        self.size = 0


class Frozen:
    """An immutable JSON value inside a document passed to ``Store.commit`` (the caller promises never to
    mutate ``value``). The first split computes its representation and remembers it on this object, tagged
    with the splitter's generation; later checkpoints reuse it in O(1): no packing, walking or hashing.
    That keeps a checkpoint's cost flat when most of the document (CrewAI's event record) never changes.

    Args:
        value: any JSON value.
        json_bytes: its compact JSON encoding, if the caller has it (saves dumping it to size the commit).
        size: the length of that encoding, when the caller knows it but does not keep the bytes.
    """

    __slots__ = ("_rep", "_token", "json_bytes", "size", "value")

    def __init__(self, value: Any, json_bytes: bytes | None = None, size: int | None = None) -> None:
        self.value = value
        self.json_bytes = json_bytes
        self.size = len(json_bytes) if json_bytes is not None else size
        self._rep: tuple[bytes, int, int] | None = None
        self._token: object = None

    def __repr__(self) -> str:
        return f"Frozen({self.value!r})"

    def forget(self) -> None:
        """Drop the representation a split remembered on this value (an inline one is the value's whole
        msgpack encoding: memory held for the run). The next split that meets the value walks it again and
        makes the same representation; ids never change. Safe while another thread splits: a split reads
        the representation once."""
        self._rep = None


class Parts:
    """A big JSON object (or array) given as consecutive pieces, so a container that grows at its end and
    changes in few places (CrewAI's event record) is split in time proportional to the pieces that changed.

    Each piece is a dict (a list for an array), usually a :class:`Frozen` one; the value is their
    concatenation in order, and it reads back as one plain dict (list): each piece becomes a leaf tree of the
    container's chunk list (objects_format.md, 'Snapshots': any valid tree graph reads back the same), so an
    unchanged Frozen piece costs O(1) and only the link list is rebuilt. Rules (the caller's promise, not
    checked: checking would walk every piece): keys are distinct across pieces, and a Frozen piece is never
    mutated. Replace a changed piece with a new Frozen.

    A piece may also be a *group*: a Parts value of the same kind (not joined, its pieces dicts or lists),
    usually a :class:`Frozen` one. It becomes one subtree of the chunk list, reused in O(1) while the
    group is the same Frozen, so a value of many pieces costs O(groups) per split, not O(pieces)
    (:class:`AppendMap` seals groups of pieces this way).

    With ``join=True`` the pieces are instead joined into one container body, as if the value were a plain
    dict (list): for a small value assembled from cached parts (a task whose embedded agent changed), so it
    costs one concatenation of the pieces' cached encodings and stays inline in its parent when small.

    Args:
        pieces: the pieces, in order.
        array: the value is a JSON array (pieces are lists) instead of an object.
        join: one container body instead of one leaf tree per piece.
        length: the number of entries, when the caller knows it (``len`` then does not visit the pieces);
            the caller's promise, like the pieces' (:class:`AppendMap` gives it).
    """

    __slots__ = ("_length", "array", "join", "pieces")

    def __init__(self, pieces: list[Any], array: bool = False, join: bool = False, *,
                 length: int | None = None) -> None:
        self.pieces = pieces
        self.array = array
        self.join = join
        self._length = length

    def __len__(self) -> int:
        if self._length is not None:
            return self._length
        return sum(len(p.value if isinstance(p, Frozen) else p) for p in self.pieces)

    def plain(self) -> dict[str, Any] | list[Any]:
        """The value as one new plain dict (list); pieces' values are shared, not copied.

        Raises:
            TypeError: a piece is not a dict (a list, for an array).
        """
        want = (list, tuple) if self.array else dict
        pieces = [p.value if isinstance(p, Frozen) else p for p in self.pieces]
        pieces = [p.plain() if isinstance(p, Parts) and p.array == self.array and not p.join else p for p in pieces]
        for p in pieces:
            if not isinstance(p, want):
                kind = "array" if self.array else "object"
                raise TypeError(f"a piece of a Parts {kind} must be a {'list' if self.array else 'dict'}, got "
                                f"{type(p).__name__}")
        if self.array:
            return [x for p in pieces for x in p]
        out: dict[str, Any] = {}
        for p in pieces:
            out.update(p)
        return out

    def __repr__(self) -> str:
        return f"Parts({self.pieces!r}, array={self.array})"


class AppendMap:
    """A mapping that grows at its end and changes in few entries (an event log), kept as :class:`Parts` so each
    checkpoint is split in time proportional to what changed since the last one.

    Entries are :class:`Frozen` values. Consecutive entries fill a piece until it holds ``piece_bytes`` of JSON
    or ``piece_entries`` entries; then the piece is sealed and the next entries start a new one. Setting a key
    that exists replaces its entry in place (same position, as a dict does) and marks only its piece for
    rebuilding. :meth:`parts` returns the current value: a piece that did not change is the same Frozen object
    as last time (reused by the store in O(1)); a changed piece becomes a new Frozen holding a copy.

    Every ``group_pieces`` sealed pieces form a group (a Frozen Parts value, one subtree of the chunk list),
    every ``group_pieces`` groups a group of groups, and so on; a group is rebuilt only when an entry under
    it changed. A checkpoint's cost is then O(group_pieces x levels + entries changed), not O(pieces) (issue
    13: a 300-task CrewAI run's event record holds ~1,400 pieces).

    Memory: the entries (shared with the caller) plus one Frozen per piece and its JSON bytes when the entries
    have theirs, i.e. about twice the JSON size of the mapping, whatever the number of checkpoints.
    """

    def __init__(self, piece_bytes: int = LEAF_BYTES, piece_entries: int = CHUNK_ENTRIES,
                 group_pieces: int = CHUNK_ENTRIES) -> None:
        self.piece_bytes = piece_bytes
        self.piece_entries = piece_entries
        self.group_pieces = group_pieces
        self._where: dict[str, int] = {}
        self._pieces: list[dict[str, Frozen]] = []
        self._frozen: list[Frozen | None] = []
        self._changed: set[int] = set()  # pieces to freeze again at the next parts()
        self._groups: list[list[Frozen | None]] = []  # per level: group g holds items [g * group_pieces, +group_pieces)
        # of the level below (level 0: the pieces); None: to build again
        self._tail_bytes = 0

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def keys(self) -> Iterator[str]:
        """The keys, in order."""
        return (k for p in self._pieces for k in p)

    def last_key(self) -> str | None:
        """The key added last (None when empty)."""
        return next(reversed(self._pieces[-1]), None) if self._pieces else None

    def set(self, key: str, value: Frozen) -> None:
        """Add ``key`` at the end, or replace its value where it stands.

        Raises:
            TypeError: ``value`` is not a Frozen value (the hint's rule), or ``key`` is not a string."""
        if not isinstance(value, Frozen) or not isinstance(key, str):
            raise TypeError(f"AppendMap.set takes a string key and a Frozen value, got {type(key).__name__} and "
                            f"{type(value).__name__}; wrap the value: Frozen(value)")
        i = self._where.get(key)
        if i is None:
            if not self._pieces or len(self._pieces[-1]) >= self.piece_entries or self._tail_bytes >= self.piece_bytes:
                self._pieces.append({})
                self._frozen.append(None)
                self._tail_bytes = 0
            i = len(self._pieces) - 1
            self._where[key] = i
            self._tail_bytes += value.size if value.size is not None else 1024
        self._pieces[i][key] = value
        self._frozen[i] = None
        self._changed.add(i)
        g = i
        for level in self._groups:  # the groups holding piece i, one per level
            g //= self.group_pieces
            if g < len(level):
                level[g] = None

    def parts(self) -> Parts:
        """The mapping now, as a Parts value: groups of sealed pieces, then the pieces after the last full
        group (unchanged groups and pieces are the same objects as last time)."""
        frozen = self._frozen
        for i in self._changed:
            piece = dict(self._pieces[i])
            size: int | None = None  # sized, not encoded again: the entries keep their bytes
            sizes = [v.size for v in piece.values()]
            if None not in sizes:
                size = 1 + sum(len(orjson.dumps(k)) + 2 for k in piece) + sum(sizes) + (0 if piece else 1)  # type: ignore[arg-type]
            frozen[i] = Frozen(piece, size=size)
        self._changed.clear()
        g_n = self.group_pieces
        items: list[Frozen] = frozen  # type: ignore[assignment]
        full = (len(items) - 1) // g_n  # groups of sealed pieces only (the last piece may still grow)
        tails: list[list[Frozen]] = []
        level = 0
        while full:
            if level == len(self._groups):
                self._groups.append([])
            groups = self._groups[level]
            del groups[full:]
            groups.extend([None] * (full - len(groups)))
            for g in range(full):
                if groups[g] is None:
                    members = items[g * g_n:(g + 1) * g_n]
                    groups[g] = Frozen(Parts(members), size=concat_size([m.size for m in members]))
            tails.append(items[full * g_n:])
            items = groups  # type: ignore[assignment]
            full = len(items) // g_n  # groups of full groups: every group is complete
            level += 1
        out = list(items)
        for tail in reversed(tails):
            out.extend(tail)
        return Parts(out, length=len(self._where))  # type: ignore[arg-type]


def concat_size(sizes: list[int | None]) -> int | None:
    """Compact JSON bytes of the concatenation of objects (arrays) of these compact JSON sizes (bytes); None
    if one is unknown. Used to size groups and by :func:`crewckpt.history.summary.json_size` for Parts."""
    full: list[int] = []
    for n in sizes:
        if n is None:
            return None
        if n > 2:  # an empty piece adds nothing, not even a comma
            full.append(n)
    return 2 + sum(n - 2 for n in full) + max(len(full) - 1, 0)


_STRICT = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS  # -> TypeError: not compared


class Refreezer:
    """Turns successive versions of one JSON value (an entity dumped at every checkpoint) into values whose
    unchanged parts are the :class:`Frozen` objects of the previous call, so the store reuses them in O(1).

    Change is detected by content, never by identity: a part is reused only when the BLAKE3 digest of its
    compact JSON (orjson and blake3, both C speed) equals last time's. A changed container is opened ``depth`` levels down: its entries
    are grouped ``group`` at a time by position into a joined :class:`Parts` value (one body, as the plain
    container), unchanged groups reused, changed groups rebuilt from their (recursively reused) entries.
    Containers under ``small`` bytes are frozen whole.

    Values are JSON as a parser gives it (the CrewAI writer feeds it ``orjson.loads`` of pydantic's dumps). A
    datetime, date, time or dataclass is not compared (orjson is told to refuse them): the value goes to the
    store unfrozen, which refuses it as any commit does. NaN, Infinity, a UUID and an Enum are the caller's to
    keep out (orjson writes them as ``null``, a string and the member's value: reused after an equal-looking
    version, they would read back as that version; found by a hostile-input review, 12-07).

    Memory: a 32-byte digest per part of the previous version (its JSON bytes are not kept: at 100 CrewAI
    tasks they were ~6.5 MB, ``depth`` copies of each entity; issue 13), plus the reused values themselves.
    """

    def __init__(self, depth: int = 3, small: int = 512, group: int = 8) -> None:
        self.depth = depth
        self.small = small
        self.group = group
        self._prev: tuple[bytes | None, Any, Any] | None = None
        self._keys: dict[str, tuple[bytes | None, Any, Any]] = {}

    def __call__(self, value: Any) -> Any:
        """``value`` with its unchanged parts reused (the caller must not mutate ``value`` afterwards)."""
        self._prev = self._node(value, self._prev, self.depth)
        return self._prev[1]

    def values(self, d: dict[str, Any]) -> dict[str, Any]:
        """A new plain dict of ``d``'s entries, each value reused or opened as by a call (per key)."""
        prev = self._keys
        self._keys = {k: self._node(v, prev.get(k), self.depth - 1) for k, v in d.items()}
        return {k: n[1] for k, n in self._keys.items()}

    def _node(self, v: Any, prev: tuple[bytes | None, Any, Any] | None, depth: int
              ) -> tuple[bytes | None, Any, Any]:
        if not isinstance(v, (dict, list)):
            return None, v, None
        try:
            b = orjson.dumps(v, option=_STRICT)
        except (TypeError, orjson.JSONEncodeError):  # surrogates, big ints, deep nesting: the store walks it
            return None, v, None
        size = len(b)
        b = blake3.blake3(b).digest()
        if prev is not None and prev[0] == b:
            return prev
        if depth <= 0 or size < self.small or len(v) < 2:
            return b, Frozen(v, size=size), None
        is_dict = isinstance(v, dict)
        items = list(v.items()) if is_dict else list(enumerate(v))  # type: ignore[union-attr]
        if len(items) > CHUNK_ENTRIES:  # too many for one body: a plain container of reused entries, which
            # the splitter cuts at content-defined boundaries as any big container (no leaf per group)
            pk = prev[2] if prev is not None and isinstance(prev[2], dict) else {}
            entries = {k: self._node(x, pk.get(k), depth - 1) for k, x in items}
            out: Any = {k: n[1] for k, n in entries.items()} if is_dict else [n[1] for n in entries.values()]
            return b, out, entries
        old = prev[2] if prev is not None and isinstance(prev[2], list) else []
        pieces: list[Frozen] = []
        nodes: list[tuple[bytes, Frozen, list[tuple[bytes | None, Any, Any]]]] = []
        g = self.group
        for gi in range(0, len(items), g):
            chunk = items[gi:gi + g]
            plain_piece: Any = dict(chunk) if is_dict else [x for _, x in chunk]
            gj = orjson.dumps(plain_piece, option=_STRICT)
            gb = blake3.blake3(gj).digest()
            pg = old[gi // g] if gi // g < len(old) else None
            if pg is not None and pg[0] == gb:
                pieces.append(pg[1])
                nodes.append(pg)
                continue
            kids_old = pg[2] if pg is not None else []
            kids = [self._node(x, kids_old[n] if n < len(kids_old) else None, depth - 1)
                    for n, (_, x) in enumerate(chunk)]
            value: Any = ({k: kid[1] for (k, _), kid in zip(chunk, kids)} if is_dict else [kid[1] for kid in kids])
            piece = Frozen(value, size=len(gj))
            pieces.append(piece)
            nodes.append((gb, piece, kids))
        return b, Parts(pieces, array=not is_dict, join=True), nodes


def _depth_checked(rep: tuple[bytes, int, int]) -> tuple[bytes, int, int]:
    """``rep`` (a whole document's) when it nests at most MAX_DEPTH levels, else DocumentTooLarge. A walk stops
    at that depth by itself; this catches subtrees taken whole from a cache or a Frozen value that sit deeper
    here than where they were first split."""
    if rep[2] > MAX_DEPTH:
        raise DocumentTooLarge(f"the document nests containers {rep[2]} levels deep, deeper than the {MAX_DEPTH} "
                               f"crewckpt stores (JSON tools stop there); flatten it")
    return rep


def _path(stack: list[_Frame]) -> str:
    """The JSON path (``$.a[0]``) of the value the walk is at, from its frames (a Parts piece adds nothing)."""
    path = "$"
    for f in stack:
        if f.parts is None and f.i < len(f.vals):
            path += f".{f.keys[f.i]}" if f.is_dict else f"[{f.i}]"
    return path


def _too_deep(stack: list[_Frame], obj: Any) -> Exception:
    """The error for a container nested past MAX_DEPTH: a ValueError naming the path when ``obj`` is one of its
    own ancestors (a value that contains itself: Frozen and Parts values are not checked for that before the
    split), else DocumentTooLarge. The messages are the summary's for a plain document."""
    seen = [n for n, f in enumerate(stack) if f.obj is obj]
    if seen:
        path = _path(stack[:seen[1] if len(seen) > 1 else len(stack)])  # up to where it first meets itself
        return ValueError(f"the document contains itself (circular reference at {path[:200]}); JSON cannot hold a "
                          f"value that contains itself: store a copy or an id instead")
    return DocumentTooLarge(f"the document nests containers deeper than {MAX_DEPTH} levels, the most crewckpt "
                            f"stores (JSON tools stop there); flatten it")


_PLAIN_LEAVES = frozenset({str, int, bool, type(None)})


def _plain_height(v: Any, hinted: frozenset[str] | None = None, pack: Callable[[Any], bytes] | None = None
                  ) -> int | None:
    """The inline nesting height of ``v`` (1: a container of scalars), or None when the walk could build anything
    but plain msgpack of it: a type that is not exactly dict, list, tuple, str, int, bool, None or a finite float
    (subclasses, NaN and Infinity are the walk's to refuse or encode), a non-string key, a container of more than
    CHUNK_ENTRIES entries, more than MAX_INLINE_DEPTH levels, or (``hinted``: the split-hint keys) a value under
    a hint key that is a string of over SEPARATE_MIN UTF-8 bytes or a container packing (``pack``) to more. Visits
    each value once, no call per value."""
    if type(v) not in _CONTAINERS:
        return None
    top = 0
    stack: list[tuple[Any, int]] = [(v, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        c, h = pop()
        if h > top:
            if h > MAX_INLINE_DEPTH:
                return None
            top = h
        if len(c) > CHUNK_ENTRIES:
            return None
        if type(c) is dict:
            for k in c:
                if type(k) is not str:
                    return None
            if hinted is not None and not hinted.isdisjoint(c) and not _small_hinted(c, hinted, pack):
                return None
            c = c.values()
        for x in c:
            t = type(x)
            if t in _PLAIN_LEAVES:
                continue
            if t in _CONTAINERS:
                push((x, h + 1))
            elif t is not float or not math.isfinite(x):
                return None
    return top


def _small_hinted(d: dict[str, Any], hinted: frozenset[str], pack: Callable[[Any], bytes] | None) -> bool:
    """Whether every value of ``d`` under a hint key stays inline there (a string of at most SEPARATE_MIN UTF-8
    bytes, a container packing to at most SEPARATE_MIN bytes, or a scalar)."""
    for k in hinted.intersection(d):
        x = d[k]
        if type(x) is str:
            if len(x) > SEPARATE_MIN // 4 and len(x.encode("utf-8")) > SEPARATE_MIN:
                return False
        elif type(x) in _CONTAINERS and (pack is None or len(pack(x)) > SEPARATE_MIN):
            return False
    return True


_CONTAINERS = frozenset({dict, list, tuple})


def _is_group(inner: Any, is_obj: bool) -> bool:
    """Whether ``inner`` (a Frozen piece's value) is a group of pieces: a Parts value of the same kind, not
    joined (its pieces are then one more level of the chunk list: objects_format.md 4, forms 2 and 3)."""
    return isinstance(inner, Parts) and not inner.join and inner.array != is_obj


class _Frame:
    __slots__ = ("below", "depth", "frozen", "height", "i", "is_dict", "join", "key", "keyed", "keys", "leaf", "obj", "out",
                 "own", "parts", "skip", "vals")

    def __init__(self, v: dict[str, Any] | list[Any] | tuple[Any, ...], key: bytes | None,
                 frozen: Frozen | None = None) -> None:
        self.frozen = frozen
        self.skip = 0  # levels below this one that skip cache keys (msgpack refused this one as too deep)
        self.keyed = 0  # keyed containers from the root down to this one (see _KEY_DEPTH)
        self.own = False  # stored as its own tree whatever its size (under one of the split policy's separate_keys)
        self.leaf = False  # stored as its own tree even when tiny (a piece of a Parts value)
        self.parts: int | None = None  # a Parts value: the form of its pieces (OBJECT or ARRAY)
        self.join = False  # a Parts value joined into one body
        self.is_dict = isinstance(v, dict)
        if self.is_dict:
            if type(v) is not dict:  # a subclass may iterate its keys in another order than its values
                v = dict(v.items())  # type: ignore[union-attr]
            for k in v:  # type: ignore[union-attr]
                if not isinstance(k, str):
                    raise TypeError(f"JSON object keys must be strings, got {type(k).__name__} key {k!r}")
            self.keys = list(v)
            self.vals = list(v.values())  # type: ignore[union-attr]
        else:
            self.keys = []
            self.vals = list(v)
        self.i = 0
        self.out: list[bytes] = []
        self.key = key
        self.height = 0
        self.below = 0  # the deepest JSON nesting of the entries finished so far (a scalar: 0)
        self.depth = 0  # JSON nesting level (the root container: 1; a Parts value's pieces share its level)
        self.obj: Any = None  # the container (for naming a cycle)


def not_json(v: object, path: str = "") -> TypeError:
    """The one-line refusal of a value JSON cannot hold, naming its type, where it is (``path``, if known) and
    the fix."""
    at = f" at {path[:200]}" if path else ""
    return TypeError(f"value of type {type(v).__name__}{at} is not JSON; give strings, numbers, bools, None, lists "
                     f"and dicts (e.g. a list for a set, a string for bytes)")


class Splitter:
    """Turns JSON values into objects for one writer; keeps the caches between checkpoints.

    Representations are msgpack bytes: a finished child is either its inline encoding or a packed link, and a
    parent's body is built by concatenating them, so an unchanged subtree is never encoded twice.

    ``put(kind, body) -> oid`` receives each object the split needs (new or not); the caller decides what is
    already stored. Cache entries made during a split are staged and kept only when :meth:`keep` is called
    after the objects landed (a failed transaction must not leave cache entries naming absent objects).

    ``separate_keys`` (the split policy, a store profile's hints: :mod:`crewckpt.history.profile`): object
    keys whose container values become their own trees, and string values blobs, even when small (over
    SEPARATE_MIN bytes). None by default: the generic store knows no document's shape.
    """

    def __init__(self, cache_bytes: int = CACHE_BYTES, *, separate_keys: frozenset[str] = frozenset()) -> None:
        self._separate = frozenset(separate_keys)
        self._cache = _Cache(cache_bytes)
        self._strs = _Cache(cache_bytes // 4)
        self._small = _Cache(cache_bytes // 8)  # own strings of SEPARATE_MIN..INLINE_MAX bytes -> their blob link
        self._keys: dict[str, bytes] = {}
        self._staged: list[tuple[Any, Any, Any]] = []  # (cache, key, rep), or (token, Frozen, rep)
        self._local: dict[Any, Any] = {}  # this split's finished containers: identical subtrees repeat a lot
        self._put: Callable[[int, bytes], bytes] = lambda k, b: ob.object_id(k, b)
        self._tokens = (object(), object(), object())  # generation tags of Frozen representations, one per place
        self._pack = msgpack.Packer(use_bin_type=True).pack  # reused: msgpack.packb allocates a buffer per call
        self._sep_packed = tuple(ob.packb(k) for k in self._separate)
        self.inline_ok = True  # the shortcut of _inline (False: always walk; the tests' reference)

    def reset(self) -> None:
        """Forget every cached representation (after a gc epoch change: objects may be gone)."""
        self._tokens = (object(), object(), object())
        self._cache.clear()
        self._strs.clear()
        self._small.clear()
        self._staged.clear()
        self._local.clear()

    def keep(self) -> None:
        """The objects of the last split are stored: publish its staged cache entries."""
        for cache, k, v in self._staged:
            if isinstance(k, Frozen):
                k._rep, k._token = v, cache  # cache: the token of the place the representation was made for
            else:
                cache.put(k, v)
        self._staged.clear()
        self._local.clear()

    def discard(self) -> None:
        """The last split's objects were not stored: drop its staged cache entries."""
        self._staged.clear()
        self._local.clear()

    def split(self, doc: Any, put: Callable[[int, bytes], bytes]) -> ob.Link:
        """Split ``doc`` into objects via ``put``; returns the root link (a TREE, or a BLOB for a long string).

        Raises:
            TypeError: a value is not JSON (e.g. bytes, a set, a non-string key).
            ValueError: a float is NaN or infinite (not JSON).
        """
        self._put = put
        self._staged.clear()
        self._local.clear()
        rep, _, _ = self._value(doc)
        link = _as_link(rep)
        if link is not None:
            return link
        inner = doc.value if isinstance(doc, Frozen) else doc
        inner = inner.value if isinstance(inner, Frozen) else inner
        if isinstance(inner, Parts):
            form = ob.ARRAY if inner.array else ob.OBJECT
        else:
            form = ob.OBJECT if isinstance(inner, dict) else ob.ARRAY if isinstance(inner, (list, tuple)) else ob.VALUE
        return ob.Link(put(ob.TREE, _tree_body(form, rep)), ob.TREE)

    # -- walking -------------------------------------------------------------------------------------------

    def _scalar(self, v: Any) -> bytes:
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{v!r} is not a JSON number (JSON has no NaN or Infinity; CrewAI writes null)")
        return self._pack(ob.pack_int(v) if isinstance(v, int) and not isinstance(v, bool) else v)  # type: ignore[no-any-return]

    def _key(self, k: str) -> bytes:
        b = self._keys.get(k)
        if b is None:
            b = ob.packb(ob.pack_str(k))
            if len(self._keys) < 100_000 and len(k) <= _KEY_CHARS:  # bounded in bytes: a document's keys may be huge
                self._keys[k] = b
        return b

    def _value(self, root: Any) -> tuple[bytes, int, int]:
        stack: list[_Frame] = []
        result: list[tuple[bytes, int, int]] = []
        separate = self._separate
        tokens = self._tokens
        local = self._local

        def push(frame: _Frame, obj: Any, in_parts: bool) -> None:
            depth = (stack[-1].depth if stack else 0) + (not in_parts)
            if depth > MAX_DEPTH:  # what a read refuses (limits.MAX_DEPTH): refused before anything is stored
                raise _too_deep(stack, obj)
            if in_parts and isinstance(obj, Parts) and any(f.obj is obj for f in stack):
                raise _too_deep(stack, obj)  # a group among its own pieces: no level is added, so no depth stops it
            frame.depth = depth
            frame.obj = obj
            stack.append(frame)

        def enter(v: Any, keyed: bool = True, own: bool = False, piece: int | None = None
                  ) -> tuple[bytes, int, int] | object:
            in_parts = piece is not None
            if piece is not None:  # a piece of a Parts value: a dict (list) or a Frozen one, its own tree
                inner = v.value if isinstance(v, Frozen) else v
                is_obj = piece % _JOINED == ob.OBJECT
                if piece < _JOINED and _is_group(inner, is_obj):
                    pass  # a group of pieces (AppendMap's sealed groups): its own chunk-list tree
                elif not isinstance(inner, dict if is_obj else (list, tuple)):
                    raise TypeError(f"a piece of a Parts {'object' if is_obj else 'array'} must be a "
                                    f"{'dict' if is_obj else 'list'}, got {type(inner).__name__}")
                if piece >= _JOINED:  # joined: the piece's own encoding, inline or not, is spliced in
                    piece = None
            if isinstance(v, (*_SCALARS, int)):
                return self._scalar(v), 0, 0
            if isinstance(v, str):
                return self._str(v, own), 0, 0
            place = _LEAF if piece is not None else _OWN if own else _PLAIN
            above = stack[-1].keyed if stack else 0
            if isinstance(v, Frozen):
                tok = tokens[place]
                held = v._rep  # read once: forget() may clear it meanwhile
                if v._token is tok and held is not None:
                    return held
                # finished earlier in this split (an agent embedded in every task it works on): keyed by the
                # object itself (alive and immutable for the split) and its place
                hit = local.get(v if place == _PLAIN else (place, v))
                if hit is not None:
                    return hit  # type: ignore[no-any-return]
                inner = v.value
                if isinstance(inner, Frozen):
                    raise TypeError("Frozen(Frozen(...)): freeze the plain value instead")
                if isinstance(inner, Parts):
                    if piece is not None and not _is_group(inner, piece % _JOINED == ob.OBJECT):
                        raise TypeError("a piece of a Parts value must be a dict or list, got Parts")
                    frame = _Frame(list(inner.pieces), None, v)
                    frame.parts = ob.ARRAY if inner.array else ob.OBJECT
                    frame.join = inner.join
                    frame.leaf = piece is not None
                    frame.own = own
                    frame.keyed = above
                    push(frame, inner, in_parts)
                    return _PENDING
                if not isinstance(inner, (dict, list, tuple)):
                    rep = enter(inner, True, own)
                    self._staged.append((tok, v, rep))  # kept for this place only (a hinted string is a blob)
                    return rep
                if place != _LEAF and self.inline_ok and len(inner) <= CHUNK_ENTRIES and (
                        v.size is None or v.size <= 2 * INLINE_MAX):  # (JSON size: only a guess of msgpack's)
                    try:
                        rep = self._inline(inner, self._pack(inner), own)
                    except (ValueError, TypeError, OverflowError, UnicodeEncodeError):
                        rep = None  # the walk refuses or encodes it
                    if rep is not None:
                        self._staged.append((tok, v, rep))
                        local[v if place == _PLAIN else (place, v)] = rep
                        return rep
                frame = _Frame(inner, None, v)
                frame.leaf = piece is not None
                frame.own = own
                frame.keyed = above
                push(frame, inner, in_parts)
                return _PENDING
            if isinstance(v, Parts):
                frame = _Frame(list(v.pieces), None)
                frame.parts = ob.ARRAY if v.array else ob.OBJECT
                frame.join = v.join
                frame.leaf = piece is not None
                frame.own = own
                frame.keyed = above
                push(frame, v, in_parts)
                return _PENDING
            if isinstance(v, (dict, list, tuple)):
                key = None
                # the root and big (chunked) containers change on nearly every checkpoint: packing them for a
                # cache key would re-encode the whole run; their entries are keyed one by one instead
                skip = max(stack[-1].skip - 1, 0) if stack else 0
                packed = None
                if keyed and not skip and len(v) <= CHUNK_ENTRIES and above < _KEY_DEPTH:
                    try:
                        packed = self._pack(v)
                    except ValueError:  # nested deeper than msgpack's limit: so are the next levels
                        skip = _DEEP_SKIP
                    except (TypeError, OverflowError, UnicodeEncodeError):
                        pass  # big ints, surrogates or not JSON: walk without the cache
                    if packed is not None:  # the digest, not the bytes: a cache entry then costs its
                        # representation only (the packed keys held ~10 MB at 100 tasks); as trustworthy as an id
                        key = blake3.blake3(packed).digest()
                if key is not None:
                    if place:
                        key = _PLACE_TAG[place] + key
                    hit = local.get(key) or self._cache.get(key)
                    if hit is not None:
                        return hit
                    if packed is not None and place != _LEAF and self.inline_ok:
                        rep = self._inline(v, packed, own)
                        if rep is not None:  # its msgpack bytes are the representation the walk would make
                            self._staged.append((self._cache, key, rep))
                            local[key] = rep
                            return rep
                frame = _Frame(v, key)
                frame.skip = skip
                frame.keyed = above + (key is not None)
                frame.own = own
                frame.leaf = piece is not None
                push(frame, v, in_parts)
                return _PENDING
            raise not_json(v, _path(stack))

        r = enter(root, keyed=False)
        if r is not _PENDING:
            return _depth_checked(r)  # type: ignore[arg-type]
        own_token = tokens[_OWN]
        while stack:
            f = stack[-1]
            vals = f.vals
            # fast path: a run of Frozen values whose representation is cached for their place (finished tasks,
            # sealed pieces of an event log) costs one check each, no call (the kind check of a piece is kept)
            i, n = f.i, len(vals)
            want: Any = None if f.parts is None else dict if f.parts == ob.OBJECT else (list, tuple)
            token = tokens[_LEAF] if f.parts is not None and not f.join else tokens[_PLAIN]
            keys = f.keys if f.is_dict and separate else None  # an entry under a hint key is in the OWN place
            while i < n:
                v = vals[i]
                if v.__class__ is not Frozen:
                    break
                rep = v._rep  # read once: forget() may clear it meanwhile
                if rep is None or v._token is not (own_token if keys is not None and keys[i] in separate else token
                                                   ) or (want is not None and not isinstance(v.value, want)):
                    break
                f.out.append(rep[0])
                if rep[1] > f.height:
                    f.height = rep[1]
                if rep[2] > f.below:
                    f.below = rep[2]
                i += 1
            f.i = i
            if i < n:
                r = enter(f.vals[f.i], True, f.is_dict and f.keys[f.i] in separate,
                          None if f.parts is None else f.parts + _JOINED if f.join else f.parts)
                if r is _PENDING:
                    continue
                f.out.append(r[0])  # type: ignore[index]
                f.height = max(f.height, r[1])  # type: ignore[index]
                f.below = max(f.below, r[2])  # type: ignore[index]
                f.i += 1
                continue
            stack.pop()
            done = self._finish(f)
            if f.key is not None:
                self._staged.append((self._cache, f.key, done))
                local[f.key] = done
            if f.frozen is not None:
                place = _LEAF if f.leaf else _OWN if f.own else _PLAIN
                self._staged.append((tokens[place], f.frozen, done))
                local[f.frozen if place == _PLAIN else (place, f.frozen)] = done
            if stack:
                p = stack[-1]
                p.out.append(done[0])
                p.height = max(p.height, done[1])
                p.below = max(p.below, done[2])
                p.i += 1
            else:
                result.append(done)
        return _depth_checked(result[0])

    def _inline(self, v: Any, packed: bytes, own: bool) -> tuple[bytes, int, int] | None:
        """The representation of container ``v`` without walking it, when its msgpack bytes ``packed`` are exactly
        what the walk would build: an inline payload (at most INLINE_MAX - 2 bytes, so every string and container
        in it is inline too), not under a split-hint key when over SEPARATE_MIN, every value under a split-hint
        key in it at most SEPARATE_MIN bytes (checked only when a hint key's packed form occurs in the bytes),
        and plain JSON all the way down (:func:`_plain_height`: exact types, string keys, finite floats, at most
        CHUNK_ENTRIES entries a container, MAX_INLINE_DEPTH levels). None: walk it. Checked against the walk in
        tests/test_splitter_determinism.py (issue 13: a new CrewAI event's nested fields were walked value by
        value, ~490 calls per checkpoint at 100 tasks)."""
        n = len(packed)
        if n + 2 > INLINE_MAX or (own and n > SEPARATE_MIN):
            return None
        hinted = None
        for k in self._sep_packed:
            if k in packed:
                hinted = self._separate
                break
        height = _plain_height(v, hinted, self._pack)
        return None if height is None else (packed, height, height)  # all inline: its depth is its height

    def _str(self, s: str, own: bool = False) -> bytes:
        """A string's representation: inline up to INLINE_MAX bytes, else a blob (over STR_CDC_MIN: cut into
        blobs under a STRING_CHUNKS tree). ``own`` (under a split-hint key): a blob already over SEPARATE_MIN
        bytes, so a long text a changing parent embeds (a task's prompt context) is not rewritten with it."""
        if len(s) < (SEPARATE_MIN // 4 if own else INLINE_MAX // 4):  # <= 4 bytes a character: surely inline
            return self._pack(ob.pack_str(s))  # type: ignore[no-any-return]
        # the caches are disjoint by the string's byte length, so a hit is the same representation a fresh
        # splitter would make here (_small: own strings that are blobs only because of ``own``)
        hit = (self._small.get(s) if own else None) or self._strs.get(s)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        b = ob.str_bytes(s)
        if len(b) <= (SEPARATE_MIN if own else INLINE_MAX):
            return ob.packb(ob.pack_str(s))
        if len(b) <= INLINE_MAX:  # own
            rep = _ext(ob.EXT_BLOB_STR, self._put(ob.BLOB, b))
            self._staged.append((self._small, s, rep))
            return rep
        if len(b) < STR_CDC_MIN:
            rep = _ext(ob.EXT_BLOB_STR, self._put(ob.BLOB, b))
        else:
            links = [_ext(ob.EXT_BLOB_STR, self._put(ob.BLOB, b[c.offset:c.offset + c.length]))
                     for c in _cdc().cut_buf(b)]
            rep = self._link_tree(ob.STRING_CHUNKS, links)
        self._staged.append((self._strs, s, rep))
        return rep

    def _finish(self, f: _Frame) -> tuple[bytes, int, int]:
        n = len(f.out)
        if f.parts is not None and f.join:
            joined = self._joined(f)
            if joined is not None:
                return joined
        if f.parts is not None:  # a Parts value: its pieces' links make the chunk list
            if not n:
                return (_map_hdr(0) if f.parts == ob.OBJECT else _arr_hdr(0)), 1, 1
            # a piece seen elsewhere first (a cache hit) may come back inline: store it as a leaf now
            links = [r if _is_link(r) else _ext(ob.EXT_TREE, self._put(ob.TREE, _tree_body(f.parts, r)))
                     for r in f.out]
            return self._link_tree(ob.OBJECT_CHUNKS if f.parts == ob.OBJECT else ob.ARRAY_CHUNKS, links), 0, f.below
        if f.is_dict:
            keys = [self._key(k) for k in f.keys]
            if n > CHUNK_ENTRIES:
                return self._chunked(ob.OBJECT, keys, f.out), 0, f.below + 1
            payload = _map_hdr(n) + b"".join(x for kv in zip(keys, f.out) for x in kv)
            form = ob.OBJECT
        else:
            if n > CHUNK_ENTRIES:
                return self._chunked(ob.ARRAY, None, f.out), 0, f.below + 1
            payload = _arr_hdr(n) + b"".join(f.out)
            form = ob.ARRAY
        height = f.height + 1
        if (len(payload) + 2 > INLINE_MAX or height > MAX_INLINE_DEPTH or f.leaf
                or (f.own and len(payload) > SEPARATE_MIN)):
            return _ext(ob.EXT_TREE, self._put(ob.TREE, _tree_body(form, payload))), 0, f.below + 1
        return payload, height, f.below + 1

    def _joined(self, f: _Frame) -> tuple[bytes, int, int] | None:
        """One body from the inline encodings of a joined Parts value's pieces (None: a piece is a link, or the
        value is too big for one body: the chunk-list form is used)."""
        total = 0
        bodies: list[bytes] = []
        for r in f.out:
            if _is_link(r):
                return None
            b0 = r[0]
            if 0x80 <= b0 <= 0x9F:  # fixmap / fixarray
                count, skip = b0 & 0x0F, 1
            elif b0 in (0xDE, 0xDC):
                count, skip = int.from_bytes(r[1:3], "big"), 3
            else:  # 0xDF, 0xDD
                count, skip = int.from_bytes(r[1:5], "big"), 5
            total += count
            bodies.append(r[skip:])
        if total > CHUNK_ENTRIES:
            return None
        form = f.parts
        payload = (_map_hdr(total) if form == ob.OBJECT else _arr_hdr(total)) + b"".join(bodies)
        height = max(f.height, 1)
        if len(payload) + 2 > INLINE_MAX or height > MAX_INLINE_DEPTH or (f.own and len(payload) > SEPARATE_MIN):
            return _ext(ob.EXT_TREE, self._put(ob.TREE, _tree_body(form, payload))), 0, f.below  # type: ignore[arg-type]
        return payload, height, f.below  # its pieces share its level: its depth is theirs

    def _chunked(self, form: int, keys: list[bytes] | None, vals: list[bytes]) -> bytes:
        """Cut entries at content-defined boundaries into leaf trees, then the link list likewise.

        An entry ends a leaf when ``crc32(its packed key, or its packed value for arrays) < 2**32 * size /
        LEAF_BYTES`` (``size``: the entry's encoded bytes): leaves average ~LEAF_BYTES whatever the entry
        size, and a boundary depends only on its own entry, so edits stay local.
        """
        links: list[bytes] = []
        start = 0
        last = len(vals) - 1
        for i in range(len(vals)):
            vb = vals[i]
            if keys is not None:
                kb = keys[i]
                h, size = zlib.crc32(kb), len(kb) + len(vb)
            else:
                h, size = zlib.crc32(vb), len(vb)
            if h < (size << 32) // LEAF_BYTES or i - start + 1 >= _FORCE_CUT or i == last:
                if keys is not None:
                    payload = _map_hdr(i + 1 - start) + b"".join(
                        x for kv in zip(keys[start:i + 1], vals[start:i + 1]) for x in kv)
                    body = _tree_body(ob.OBJECT, payload)
                else:
                    body = _tree_body(ob.ARRAY, _arr_hdr(i + 1 - start) + b"".join(vals[start:i + 1]))
                links.append(_ext(ob.EXT_TREE, self._put(ob.TREE, body)))
                start = i + 1
        return self._link_tree(ob.OBJECT_CHUNKS if form == ob.OBJECT else ob.ARRAY_CHUNKS, links)

    def _link_tree(self, form: int, links: list[bytes]) -> bytes:
        """Store a chunk-list tree of packed links; lists longer than CHUNK_ENTRIES get another level
        (boundaries picked by the child ids)."""
        while len(links) > CHUNK_ENTRIES:
            upper: list[bytes] = []
            start = 0
            for i, ln in enumerate(links):
                if (ln[3] & _MASK) == 0 or i - start + 1 >= _FORCE_CUT or i == len(links) - 1:
                    body = _tree_body(form, _arr_hdr(i + 1 - start) + b"".join(links[start:i + 1]))
                    upper.append(_ext(ob.EXT_TREE, self._put(ob.TREE, body)))
                    start = i + 1
            links = upper
        if len(links) == 1 and form != ob.STRING_CHUNKS:
            return links[0]
        return _ext(ob.EXT_TREE, self._put(ob.TREE, _tree_body(form, _arr_hdr(len(links)) + b"".join(links))))


# -- assembling --------------------------------------------------------------------------------------------

TreeLoader = Callable[[list[bytes]], dict[bytes, tuple[int, Any]]]
BlobLoader = Callable[[list[bytes]], dict[bytes, bytes]]


def links_in(payload: Any) -> Iterator[ob.Link]:
    """Every Link inside a decoded payload (iterative: payloads are at most 64 levels deep, but be safe)."""
    stack = [payload]
    while stack:
        v = stack.pop()
        if isinstance(v, ob.Link):
            yield v
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def prefetch(root: ob.Link, trees: TreeLoader, blobs: BlobLoader) -> tuple[dict[bytes, tuple[int, Any]],
                                                                           dict[bytes, bytes]]:
    """Load every object under ``root``, one batch per level. Returns (trees, blobs) by id."""
    t: dict[bytes, tuple[int, Any]] = {}
    b: dict[bytes, bytes] = {}
    level = [root]
    while level:
        tree_ids = list({ln.oid for ln in level if ln.kind == ob.TREE and ln.oid not in t})
        blob_ids = list({ln.oid for ln in level if ln.kind == ob.BLOB and ln.oid not in b})
        if blob_ids:
            b.update(blobs(blob_ids))
        level = []
        if tree_ids:
            got = trees(tree_ids)
            t.update(got)
            for oid in tree_ids:
                level.extend(links_in(got[oid][1]))
    return t, b


def assemble(root: ob.Link, trees: TreeLoader, blobs: BlobLoader, budget: ReadBudget | None = None) -> Any:
    """Rebuild the JSON value under ``root``. Fresh containers every time (shared subtrees are copied).

    ``budget``: when given, the expanded size (values, string bytes, depth: :func:`expanded_size`) is
    checked against it before anything is built, so a tree linking one subtree many times is refused in
    time linear in its distinct objects.

    Raises:
        MissingObject, IntegrityError: from the loaders; IntegrityError also when the graph is malformed
        (a chunk list mixing forms, an object tree under an array chunk list, ...). DocumentTooLarge: over
        ``budget``.
    """
    t, b = prefetch(root, trees, blobs)
    if budget is not None:
        budget.check_expanded(*expanded_size(root, t, b))
    holder: list[Any] = []
    # each frame: (items iterator, destination container)
    stack: list[tuple[Iterator[tuple[Any, Any]], Any]] = [(iter([(None, root)]), holder)]
    while stack:
        it, dst = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            stack.pop()
            continue
        k, rep = nxt
        kind, content = _expand(rep, t, b)
        if kind == "dict":
            v: Any = {}
            stack.append((iter(content), v))
        elif kind == "list":
            v = []
            stack.append((((None, x) for x in content), v))
        else:
            v = content
        if isinstance(dst, dict):
            dst[k] = v
        else:
            dst.append(v)
    return holder[0]


def _expand(rep: Any, t: dict[bytes, tuple[int, Any]], b: dict[bytes, bytes]) -> tuple[str, Any]:
    if isinstance(rep, dict):
        return "dict", iter(rep.items())
    if isinstance(rep, list):
        return "list", rep
    if not isinstance(rep, ob.Link):
        return "scalar", rep
    if rep.kind == ob.BLOB:
        return "scalar", _bytes_str(rep.oid, b[rep.oid])
    form, payload = t[rep.oid]
    if form == ob.OBJECT:
        return "dict", iter(payload.items())
    if form == ob.ARRAY:
        return "list", payload
    if form == ob.VALUE:
        return "scalar", payload
    if form == ob.OBJECT_CHUNKS:
        return "dict", _leaves(rep.oid, t, ob.OBJECT, ob.OBJECT_CHUNKS, lambda p: p.items())
    if form == ob.ARRAY_CHUNKS:
        return "list", _leaves(rep.oid, t, ob.ARRAY, ob.ARRAY_CHUNKS, lambda p: p)
    return "scalar", _bytes_str(rep.oid, b"".join(_string_pieces(rep.oid, t, b)))


def _bytes_str(oid: bytes, data: bytes) -> str:
    try:
        return ob.bytes_str(data)
    except DecodeError as e:
        raise IntegrityError(oid.hex(), str(e)) from None


def _chunk_leaves(oid: bytes, t: dict[bytes, tuple[int, Any]], inner: int, leaf: int | None) -> Iterator[ob.Link]:
    """Depth-first leaves under a chunk-list tree of form ``inner``: trees of form ``leaf``, or blobs (string
    chunk lists). Iterative: a hostile store cannot exhaust the stack."""
    stack = [iter([ob.Link(oid, ob.TREE)])]
    while stack:
        ln = next(stack[-1], None)
        if ln is None:
            stack.pop()
        elif ln.kind == ob.BLOB and leaf is None:
            yield ln
        elif ln.kind == ob.TREE and t[ln.oid][0] == inner:
            stack.append(iter(t[ln.oid][1]))
        elif ln.kind == ob.TREE and t[ln.oid][0] == leaf:
            yield ln
        else:
            raise IntegrityError(ln.oid.hex(), f"unexpected {KIND_WORD.get(ln.kind, ln.kind)} in a chunk list of "
                                               f"form {inner}")


KIND_WORD = {ob.BLOB: "blob", ob.TREE: "tree"}


def _leaves(oid: bytes, t: dict[bytes, tuple[int, Any]], leaf: int, inner: int,
            items: Callable[[Any], Any]) -> Iterator[Any]:
    for ln in _chunk_leaves(oid, t, inner, leaf):
        yield from items(t[ln.oid][1])


def _string_pieces(oid: bytes, t: dict[bytes, tuple[int, Any]], b: dict[bytes, bytes]) -> Iterator[bytes]:
    return (b[ln.oid] for ln in _chunk_leaves(oid, t, ob.STRING_CHUNKS, None))


def expanded_size(root: ob.Link, t: dict[bytes, tuple[int, Any]], b: Mapping[bytes, bytes | int],
                  memo: dict[bytes, tuple[int, int, int]] | None = None) -> tuple[int, int, int]:
    """``(values, string bytes, depth)`` of the document under ``root`` as :func:`assemble` would build it:
    every JSON value counts 1 (a shared subtree once per place it is linked from), strings and keys count
    their length, depth is the container nesting. Each distinct tree is visited once (memoized, no
    recursion), so the cost is linear in the store's objects, not in the expanded size. ``b`` maps blob ids to
    their bytes or just their lengths; ``memo`` may be shared between documents of one store (fsck)."""
    if root.kind == ob.BLOB:
        return 1, _blob_len(b[root.oid]), 0
    memo = {} if memo is None else memo
    stack: list[tuple[bytes, bool]] = [(root.oid, False)]
    while stack:
        oid, ready = stack.pop()
        if oid in memo:
            continue
        if not ready:
            stack.append((oid, True))
            stack.extend((ln.oid, False) for ln in links_in(t[oid][1]) if ln.kind == ob.TREE and ln.oid not in memo)
            continue
        memo[oid] = _tree_size(oid, t, b, memo)
    return memo[root.oid]


def _blob_len(v: bytes | int) -> int:
    return v if isinstance(v, int) else len(v)


def _tree_size(oid: bytes, t: dict[bytes, tuple[int, Any]], b: Mapping[bytes, bytes | int],
               memo: dict[bytes, tuple[int, int, int]]) -> tuple[int, int, int]:
    form, payload = t[oid]

    def child(ln: ob.Link) -> tuple[int, int, int]:
        if ln.kind == ob.BLOB:
            return 1, _blob_len(b[ln.oid]), 0
        got = memo.get(ln.oid)
        if got is None:  # only a graph with a cycle gets here, and verified ids rule cycles out
            raise IntegrityError(oid.hex(), "tree links to a tree that links back to it")
        return got

    if form in (ob.OBJECT_CHUNKS, ob.ARRAY_CHUNKS, ob.STRING_CHUNKS):
        parts = [child(ln) for ln in payload]
        if form == ob.STRING_CHUNKS:
            return 1, sum(p[1] for p in parts), 0
        return 1 + sum(p[0] - 1 for p in parts), sum(p[1] for p in parts), max((p[2] for p in parts), default=1)
    nodes = nbytes = depth = 0
    todo: list[tuple[Any, int]] = [(payload, 0)]
    while todo:
        v, level = todo.pop()
        if isinstance(v, ob.Link):
            n, by, d = child(v)
            nodes, nbytes, depth = nodes + n, nbytes + by, max(depth, level + d)
        elif isinstance(v, dict):
            nodes += 1
            depth = max(depth, level + 1)
            nbytes += sum(len(k) for k in v)
            todo.extend((x, level + 1) for x in v.values())
        elif isinstance(v, list):
            nodes += 1
            depth = max(depth, level + 1)
            todo.extend((x, level + 1) for x in v)
        else:
            nodes += 1
            nbytes += len(v) if isinstance(v, str) else 8
            depth = max(depth, level)
    return nodes, nbytes, depth
