"""CommitInfo: the user-facing view of a commit (hex ids, decoded summary and metadata)."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import math
from typing import Any

import msgpack
import orjson

from crewckpt.backends.base import IndexRow, MetaStore
from crewckpt.errors import DecodeError
from crewckpt.format import objects as ob
from crewckpt.history.limits import MAX_DEPTH


@dataclasses.dataclass(slots=True)
class CommitInfo:
    """One commit. Ids are 64-hex strings; ``time_ns`` is UTC nanoseconds since the epoch; ``seq`` is this
    store's write (arrival) sequence, from the commit index (increasing along every branch; orders commits
    when clocks tie or jump); ``branch`` the branch the commit belongs to here and ``summary`` the listing
    summary, also from the index: a JSON object with ``logical_bytes`` (document size, compact JSON) and the
    keys of the writing store's profile (:mod:`crewckpt.history.profile`; CrewAI's:
    :mod:`crewckpt.views.document`). ``live`` is False for a commit that prune removed but whose object still
    exists: it has no index row, so ``seq`` is :data:`UNINDEXED_SEQ` and ``branch`` is ``""``."""

    id: str
    tree: str
    parents: tuple[str, ...]
    time_ns: int
    seq: int
    branch: str
    run_id: str
    trigger: str | None
    summary: dict[str, Any]
    meta: dict[str, Any]
    alias: str | None
    live: bool = True

    @property
    def short(self) -> str:
        """The 12-character short id used in human output."""
        return self.id[:12]

    @property
    def time(self) -> datetime.datetime:
        """``time_ns`` as an aware UTC datetime."""
        return datetime.datetime.fromtimestamp(self.time_ns / 1e9, tz=datetime.timezone.utc)

    def to_json(self) -> dict[str, Any]:
        """Stable JSON form (documented in docs/cli-json.md)."""
        return {
            "id": self.id, "tree": self.tree, "parents": list(self.parents), "time_ns": self.time_ns,
            "time": self.time.isoformat(), "seq": self.seq, "branch": self.branch, "run_id": self.run_id,
            "trigger": self.trigger, "alias": self.alias, "live": self.live, "meta": self.meta,
            "summary": dict(self.summary),
        }


MAX_TIME_NS = 2**63 - 1  # ns since 1970: the commit index stores it as a signed 64-bit integer


def check_commit_fields(*, time_ns: Any, run_id: Any, trigger: Any, alias: Any) -> None:
    """Refuse, before anything is written, commit fields a reader would refuse (objects_format.md, 'Commits':
    an int time and text fields; a stored commit of other types made its whole branch unreadable). None is
    allowed for each (the default).

    Raises:
        TypeError: ``time_ns`` not an int (a float such as ``time.time() * 1e9``, a bool, a string), or a text
            field not a string. ValueError: ``time_ns`` outside 0..2**63-1, or a text field holding a lone
            surrogate (not UTF-8)."""
    if time_ns is not None:
        if not isinstance(time_ns, int) or isinstance(time_ns, bool):
            raise TypeError(f"time_ns must be an int of nanoseconds since 1970, got {type(time_ns).__name__}; use "
                            f"time.time_ns() (time.time() * 1e9 is a float)")
        if not 0 <= time_ns <= MAX_TIME_NS:
            raise ValueError(f"time_ns {time_ns} is outside 0..2**63-1 nanoseconds since 1970; use time.time_ns()")
    for name, v in (("run_id", run_id), ("trigger", trigger), ("alias", alias)):
        if v is None:
            continue
        if not isinstance(v, str):
            raise TypeError(f"{name} must be a string or None, got {type(v).__name__}")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{name} holds a lone surrogate (not UTF-8 text); give valid text") from None


def meta_json(meta: Any) -> str | None:
    """A commit's ``meta`` as the compact JSON text the commit keeps (None for None or an empty dict).

    Raises:
        TypeError: ``meta`` is not a dict with string keys, or a value is not JSON (an int beyond 64 bits,
            a lone surrogate, bytes, a set).
        ValueError: a float is NaN or infinite (JSON has neither; orjson would write null).
    """
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise TypeError(f"meta must be a dict of JSON values, got {type(meta).__name__}; pass meta={{'key': value}}")
    if not meta:
        return None
    # checked before orjson sees it: orjson 3.13 crashes the process on deeply nested or cyclic tuples, and writes
    # NaN and Infinity as null, a UUID, datetime or Enum as a string or value, a dataclass as a dict
    stack: list[tuple[Any, int]] = [(meta, 1)]
    while stack:
        v, level = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"meta holds {v!r}, which is not JSON; give a finite number, a string or None")
        if isinstance(v, (dict, list, tuple)):
            if level > MAX_DEPTH:
                raise ValueError(f"meta nests deeper than {MAX_DEPTH} levels or contains itself; give a flat dict of "
                                 "JSON values")
            stack.extend((x, level + 1) for x in (v.values() if isinstance(v, dict) else v))
        elif not isinstance(v, (str, int, float, type(None))):
            raise TypeError(f"meta holds a value of type {type(v).__name__}, which is not JSON; give strings, 64-bit "
                            f"ints, floats, bools, None, lists and dicts (e.g. str(value))")
    try:
        text = orjson.dumps(meta).decode()
    except (TypeError, orjson.JSONEncodeError) as e:
        raise TypeError(f"meta is not JSON ({e}); give it strings, 64-bit ints, floats, bools, None, lists and "
                        "dicts") from None
    return text


def _meta(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    v = orjson.loads(text)
    return v if isinstance(v, dict) else {"value": v}


def _summary(packed: bytes) -> dict[str, Any]:
    """An index row's summary: a msgpack map (written by this version), or a format-1 store's 5-slot list
    (read as the same keys). Raises DecodeError for anything else, or a value JSON cannot hold."""
    try:
        v = msgpack.unpackb(packed)  # no ext hook: an extension value stays an ExtType, refused below
    except Exception:  # msgpack raises several types on damaged input
        raise DecodeError("commit summary is not msgpack") from None
    if type(v) is dict:
        for val in v.values():  # the common shapes checked inline: listing decodes thousands of rows
            tv = type(val)
            if tv is int or tv is str or (tv is list and all(
                    type(p) is list and len(p) == 2 and type(p[0]) is str and type(p[1]) is str for p in val)):
                continue
            ob.check_json(v)  # anything else: the full check (no bytes, extension values or odd keys)
            break
        return v
    return ob.V1Summary.decode(v).as_map()


_V1_KEYS = ("entities", "tasks_done", "tasks_total", "event_count", "logical_bytes")


def encode_summary(summary: dict[str, Any]) -> bytes:
    """The index row form of a summary map (``IndexRow.summary``): a msgpack map, except that a map with
    exactly the format-1 keys in their order (what the CrewAI profile writes) is stored in the positional
    5-slot layout :func:`_summary` already reads back as the same map (~60 bytes less per row than with
    key names: 0.6 MB on a 10,000-commit store, and faster listing)."""
    ents = summary.get("entities")
    if tuple(summary) == _V1_KEYS and isinstance(ents, list) and all(
            isinstance(e, (list, tuple)) and len(e) == 2 and all(type(p) is str for p in e) for e in ents):
        try:
            return ob.packb(ob.V1Summary.decode([summary[k] for k in _V1_KEYS]).encode())
        except DecodeError:  # not the format-1 types: keep it as a map
            pass
    return ob.packb(summary)


def from_row(r: IndexRow) -> CommitInfo:
    """CommitInfo from a commit-index row (no object read).

    Raises:
        DecodeError: the row is damaged (summary or meta undecodable, a field of the wrong type); the message
            names the commit. The commit object is authoritative: callers may fall back to it.
    """
    try:
        info = CommitInfo(r.id.hex(), r.tree.hex(), tuple(p.hex() for p in r.parents), r.time_ns, r.seq,
                          r.branch, r.run_id, r.trigger, _summary(r.summary), _meta(r.meta_json), r.alias)
        ok = (row_damage(r) is None and isinstance(r.time_ns, int)
              and isinstance(r.run_id, str) and all(isinstance(x, (str, type(None))) for x in (r.trigger, r.alias)))
    except (DecodeError, ValueError, TypeError):  # orjson.JSONDecodeError is a ValueError
        ok = False
    if not ok:
        raise DecodeError(f"the commit-index row of {r.id.hex()[:64]} is damaged; run `ckpt fsck --full`")
    return info


REBUILD = "rebuild the commit index with `ckpt fsck --rebuild-index`"
"""The fix for an index row whose local fields (seq, branch) or copies of the object's are damaged."""


def row_damage(r: IndexRow) -> str | None:
    """What is wrong with an index row's own fields (its id, seq, parents or branch), one clause, or None.
    A row that fails here is a damaged cache: the commit object may still be intact."""
    if not isinstance(r.id, bytes) or len(r.id) != ob.ID_BYTES:
        return f"its id {bytes(r.id).hex()[:64]!r} is not a {ob.ID_BYTES}-byte id"
    if not isinstance(r.seq, int) or isinstance(r.seq, bool):
        return f"its seq {str(r.seq)[:30]!r} is not a whole number"
    bad = [p for p in r.parents if len(p) != ob.ID_BYTES]
    if bad:
        return f"it lists a malformed parent id {bad[0].hex()[:64]} ({len(bad[0])} bytes, not {ob.ID_BYTES})"
    if not branch_ok(r.branch):
        return f"its branch {str(r.branch)[:60]!r} is not a valid branch name"
    return None


def branch_ok(name: object) -> bool:
    """Whether an index row's branch column is usable: a valid branch name, or "" (none known: a rebuilt
    row of a commit no branch reaches)."""
    return isinstance(name, str) and (name == "" or _valid_branch(name))


@functools.lru_cache(maxsize=256)
def _valid_branch(name: str) -> bool:
    from crewckpt.history.refnames import check_branch  # refnames imports nothing of history

    try:
        return check_branch(name) == name
    except ValueError:
        return False


def damaged_row(r: IndexRow) -> DecodeError:
    """The one-line error for an index row :func:`row_damage` refuses (names the row and the fix)."""
    return DecodeError(f"the commit-index row of {bytes(r.id).hex()[:64]} is damaged: {row_damage(r)} (the "
                       f"index is a cache; its commit object is not affected); {REBUILD}")


UNINDEXED_SEQ = 0
"""``CommitInfo.seq`` of a commit outside the commit index (pruned but present, or reached only through
objects): local order exists only in the index, and 0 sorts before every indexed commit (seqs start at 1)."""


def from_commit(cid: bytes, c: ob.Commit, live: bool) -> CommitInfo:
    """CommitInfo from a decoded commit object alone, for a commit with no commit-index row.

    The local fields a commit body does not hold come back as "unknown here": ``seq`` is
    :data:`UNINDEXED_SEQ`, ``branch`` is ``""`` and the summary is empty ``{}`` (a format-1 body's summary,
    derived from the document, is used). A format-1 body's seq and branch are never used (objects_format.md 5.3).
    """
    return CommitInfo(cid.hex(), c.tree.oid.hex(), tuple(p.hex() for p in c.parents), c.time_ns, UNINDEXED_SEQ,
                      "", c.run_id, c.trigger, c.v1_summary.as_map() if c.v1_summary else {}, _meta(c.meta_json), c.alias,
                      live)


def to_row(cid: bytes, c: ob.Commit, branch: str, seq: int, summary: dict[str, Any]) -> IndexRow:
    """The commit-index row of a commit object: its fields plus the local ones (``branch`` it belongs to,
    for prune; ``seq``, its local write order; ``summary`` of its document, for listing)."""
    return IndexRow(cid, branch, seq, c.time_ns, c.run_id, c.trigger, c.parents, c.tree.oid,
                    encode_summary(summary), c.alias, c.meta_json)


_COPIED = ("parents", "tree", "time_ns", "run_id", "trigger", "meta_json", "alias")
"""The index row fields that copy the commit object's (the rest, branch, seq and summary, are local)."""


def distinct_parents(parents: list[bytes]) -> tuple[list[bytes], list[bytes]]:
    """``parents`` with each id once, in first-seen order, and the ids that were repeated (objects_format.md 5.3:
    a writer lists a parent once, as git's commit-tree does)."""
    seen: dict[bytes, None] = {}
    dropped = []
    for p in parents:
        if p in seen:
            if p not in dropped:
                dropped.append(p)
        else:
            seen[p] = None
    return list(seen), dropped


def repeated_parents(parents: tuple[bytes, ...]) -> dict[bytes, int]:
    """Parent id -> count, for each id a commit object lists more than once (another store's writer)."""
    counts: dict[bytes, int] = {}
    for p in parents:
        counts[p] = counts.get(p, 0) + 1
    return {p: n for p, n in counts.items() if n > 1}


def _object_fields(c: ob.Commit) -> tuple[Any, ...]:
    return c.parents, c.tree.oid, c.time_ns, c.run_id, c.trigger, c.meta_json, c.alias


def row_matches(row: IndexRow, c: ob.Commit) -> bool:
    """Whether an index row's copies of the commit object's own fields agree with the object (the local
    fields, branch, seq and summary, are the index's own and not compared)."""
    return tuple(getattr(row, f) for f in _COPIED) == _object_fields(c)


def row_differences(row: IndexRow, c: ob.Commit) -> list[str]:
    """Names of the copied fields (``parents``, ``tree``, ``time``, ``run``, ``trigger``, ``meta``,
    ``alias``) where index row ``row`` disagrees with its commit object ``c``; empty when it agrees."""
    return [f.removesuffix("_ns").removesuffix("_id").removesuffix("_json")
            for f, mine in zip(_COPIED, _object_fields(c)) if getattr(row, f) != mine]


@dataclasses.dataclass(frozen=True)
class PrunedCommit:
    """A log entry for a parent whose commit object is gone (pruned and collected)."""

    id: str
    live: bool = False


def raise_version(w: MetaStore, version: int) -> None:
    """Record store format ``version`` in the write scope ``w`` unless the store records that or more already
    (another handle may have raised it since this one opened: never lowered)."""
    cur = w.meta_get("format_version")
    if not (cur and cur.isascii() and cur.isdigit() and int(cur) >= version):
        w.meta_set("format_version", str(version))
