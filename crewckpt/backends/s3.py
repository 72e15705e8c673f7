"""S3 backend: a store on any S3-compatible object storage (AWS S3, SeaweedFS, MinIO...), chosen by
``s3://bucket/prefix?endpoint=http://host:port&region=us-east-1`` (credentials the usual AWS way: environment
variables, profile, instance role). Needs the ``crewckpt[s3]`` extra (boto3).

Layout under ``prefix`` (every key below is an S3 object; docs/backends.md, 'S3'):

* ``packs/<time_ns>-<rand>``: one PUT per :meth:`put_many` batch (one per checkpoint): a msgpack index
  ``[time, [(oid, kind, size, offset, length, head[, time]), ...]]`` behind a 4-byte length, then the
  frames. ``head`` is the frame's first HEAD_BYTES bytes (so listing needs no frame reads); an entry with
  length -1 is a *touch*: the object is present elsewhere and its stored time becomes the entry's time (the
  pack's, unless gc copied the entry and kept its older time). Readers list the pack indexes once and list
  again on a miss.
* ``dead/<time_ns>-<rand>``: gc's deletions, as tombstones ``(cutoff, [oid...])``, and *doomed records*
  ``{"packs": [...]}``: packs a gc is about to delete. An object is present when some pack holds its frame
  and its newest put is at or after the newest cutoff naming it: a writer that puts an object again after
  gc decided keeps it, whatever order the two requests land in. Writers send frames (no touch) for objects
  whose frames are only in doomed packs.
* ``locks/<name>``: leases (``{"owner", "held", "expires_ns"}``, conditional writes) -- gc holds
  ``locks/gc`` while it reclaims space (docs/backends.md, 'Reclaiming space on S3').
* ``refs/<name>``: ``{"oid", "w"}`` moved by conditional writes (``If-None-Match: *`` to create,
  ``If-Match: <etag>`` to move; a deleted ref keeps its key with ``oid`` null). ``w`` is a write id: a retry
  after a lost response that finds its own write counts as success, not as a conflict.
* ``reflog/<ref>/<time_ns>-<n>-<rand>`` (one object per entry), ``symrefs/<name>``, ``meta/<key>``,
  ``counters/<name>`` (conditional-write loop), ``index/<cid>``, ``alias/<alias>`` (create-if-absent).

The index is a derived cache: correctness comes from objects and refs. Before the first write, a self-test
checks that the server enforces conditional writes; a server that ignores them is refused for writing.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import datetime
import json
import os
import re
import socket
import struct
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple

import boto3  # type: ignore[import-untyped]  # the extra: ImportError here becomes "pip install 'crewckpt[s3]'" (registry)
import botocore.config  # type: ignore[import-untyped]
import botocore.exceptions  # type: ignore[import-untyped]
import msgpack

from crewckpt.backends.base import (
    HEAD_BYTES,
    Backend,
    Capabilities,
    IndexRow,
    MetaStore,
    ObjectMeta,
    ReflogEntry,
    StoredObject,
    ref_conflict,
)
from crewckpt.backends.registry import Location, Opened, Opener, redact, repeated_key
from crewckpt.errors import (
    BadLocation,
    CkptError,
    CorruptStore,
    GcAborted,
    StoreExists,
    StoreNotFound,
    StoreWriteError,
)
from crewckpt.format import objects as ob
from crewckpt.format.frame import PACK_KEY, PACKED

GC_GRACE_S = 300.0  # stored times come from each writer's clock: a grace above the clock skew between machines
LEASE_S = 60.0  # a gc lease not renewed for this long is free again (its holder was killed)
SETTLE_S = 5.0  # gc waits min(grace, this) between publishing a doomed record and listing again
SMALL_PACK = 1 << 20  # bytes of frames: smaller packs are merged by gc (per-checkpoint packs)
COPY_PACK_MAX = 64 << 20  # bytes of frames per pack gc writes
_EPOCH = "gc_epoch"
SELF_TEST_WRITERS = 6
_CONFLICT_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409", "OperationAborted"}
_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}
_HEAD = struct.Struct(">I")


class S3Location:
    """A parsed ``s3://bucket/prefix?endpoint=...&region=...`` location."""

    def __init__(self, url: str) -> None:
        """Raises BadLocation (one line, secrets masked): not ``s3://bucket...``, credentials in the URL, an
        unknown or repeated option, an endpoint that is not ``http(s)://host[:port]``, a region that is not a
        plain name."""
        shown = redact(url)
        try:
            p = urllib.parse.urlsplit(url)
        except ValueError as e:
            raise BadLocation(f"{shown}: not an S3 location ({e}); write s3://bucket/prefix?endpoint=...") from None
        if p.scheme.lower() != "s3" or not p.netloc:
            raise BadLocation(f"{shown}: an S3 location is s3://bucket/prefix?endpoint=http://host:port&region=...")
        if "@" in p.netloc:  # a location is shown in messages and recorded with remotes: no place for a key pair
            raise BadLocation(f"{shown}: credentials do not go in an S3 location; drop the part before '@' and set "
                              f"AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE")
        twice = repeated_key(p.query)
        if twice is not None:
            raise BadLocation(f"{shown}: {twice}= is given more than once; give it once")
        q = dict(urllib.parse.parse_qsl(p.query, keep_blank_values=True))
        unknown = set(q) - {"endpoint", "region"}
        if unknown:
            raise BadLocation(f"{shown}: unknown S3 location option(s) {', '.join(sorted(unknown))}; "
                              f"only endpoint= and region= are known")
        self.bucket = p.netloc
        self.prefix = p.path.strip("/")
        self.endpoint = _endpoint(q.get("endpoint") or None, shown)
        self.region = q.get("region") or None
        if self.region is not None and not _REGION.fullmatch(self.region):
            raise BadLocation(f"{shown}: region {self.region!r} is not a plain region name (letters, digits, "
                              f"'-', '_', '.'), e.g. region=us-east-1")
        query = urllib.parse.urlencode({k: v for k, v in (("endpoint", self.endpoint), ("region", self.region))
                                        if v})
        self.identity = f"s3://{self.bucket}/{self.prefix}" + (f"?{query}" if query else "")

    def key(self, *parts: str) -> str:
        """The object key of ``parts`` under the store's prefix."""
        return "/".join([self.prefix, *parts] if self.prefix else parts)


_REGION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _endpoint(text: str | None, shown: str) -> str | None:
    """``text`` if it is ``http(s)://host[:port]`` (an optional trailing ``/``), else BadLocation naming it."""
    if text is None:
        return None
    why = None
    e: urllib.parse.SplitResult | None
    try:
        e = urllib.parse.urlsplit(text)
        _ = e.port  # ValueError when not a number in range
    except ValueError:
        e, why = None, "is not a URL"
    if e is not None:
        if e.scheme.lower() not in ("http", "https"):
            why = "is not http:// or https://"
        elif not e.hostname:
            why = "names no host"
        elif "@" in e.netloc:
            why = "holds credentials (set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE instead)"
        elif e.path not in ("", "/") or e.query or e.fragment or any(c.isspace() for c in text):
            why = "has more than scheme, host and port"
    if why is not None:
        raise BadLocation(f"{shown}: endpoint {redact(text, nested=True)!r} {why}; write endpoint=http://host:port "
                          f"(or https://)")
    return text


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _code(e: botocore.exceptions.ClientError) -> str:
    err = e.response.get("Error", {})
    return str(err.get("Code") or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _is_conflict(e: Exception) -> bool:
    if not isinstance(e, botocore.exceptions.ClientError):
        return False
    status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return _code(e) in _CONFLICT_CODES or status in (409, 412)


def _is_missing(e: Exception) -> bool:
    if not isinstance(e, botocore.exceptions.ClientError):
        return False
    return _code(e) in _MISSING_CODES or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 404


_self_tested: dict[tuple[str | None, str], bool] = {}
_self_test_lock = threading.Lock()
_seq_lock = threading.Lock()
_seq = [0]


def _next_n() -> int:
    with _seq_lock:
        _seq[0] += 1
        return _seq[0]


class _Entry(NamedTuple):
    """One entry of a pack index: a frame at ``off`` (absolute in the pack) of ``ln`` bytes, or a touch
    (``ln`` -1); ``head`` the frame's first HEAD_BYTES bytes (None in packs written before heads were
    indexed, and for touches); ``t`` the entry's stored time (the pack's, unless a gc copy kept an older one)."""

    oid: bytes
    kind: int
    size: int
    off: int
    ln: int
    head: bytes | None
    t: int


class _Loc(NamedTuple):
    """Where the view reads a present object: its frame in ``pack``; ``touched`` its newest put;
    ``doomed``: that pack is named by a doomed record (a gc deletes it soon; no other pack holds a frame)."""

    pack: str
    kind: int
    size: int
    off: int
    ln: int
    touched: int
    head: bytes | None
    doomed: bool


class S3Backend(Backend):
    """A store under one bucket prefix. Thread-safe (boto3 clients are); several processes and machines may
    share one store (``shared``); no transactions, no locks: the store follows the ordering invariants."""

    capabilities = Capabilities(transactions=False, locks=True, cheap_listing=False, reframe=False, shared=True,
                                persistent=True, gc_grace_s=GC_GRACE_S)

    def __init__(self, location: str | S3Location, *, client: Any = None, gc_grace_s: float = GC_GRACE_S,
                 lease_s: float = LEASE_S, settle_s: float | None = None) -> None:
        """``client``: a boto3 S3 client to use (tests wrap one); default: one from the location and the usual
        AWS credentials. ``gc_grace_s``: see :attr:`capabilities`. ``lease_s``: how long a lease this handle
        takes outlives its last renewal (:meth:`lock`). ``settle_s``: gc's pause between publishing the packs
        it deletes and listing again (default ``min(gc_grace_s, SETTLE_S)``)."""
        if gc_grace_s != GC_GRACE_S:
            self.capabilities = Capabilities(transactions=False, locks=True, cheap_listing=False, reframe=False,
                                             shared=True, persistent=True, gc_grace_s=gc_grace_s)
        self.lease_s = lease_s
        self.settle_s = min(gc_grace_s, SETTLE_S) if settle_s is None else settle_s
        self.loc = location if isinstance(location, S3Location) else S3Location(location)
        self.where = self.loc.identity
        self.s3 = client if client is not None else boto3.client(
            "s3", endpoint_url=self.loc.endpoint, region_name=self.loc.region,
            config=botocore.config.Config(retries={"max_attempts": 4, "mode": "standard"},
                                          max_pool_connections=32, s3={"addressing_style": "path"}))
        self._lock = threading.Lock()
        self._packs: dict[str, tuple[int, list[_Entry]]] = {}  # pack key -> (time, index)
        self._dead: dict[str, tuple[int, list[bytes], list[str]]] = {}  # key -> tombstone / doomed packs
        self._view: dict[bytes, _Loc] | None = None  # present objects
        self._cut: dict[bytes, int] = {}
        self._doomed: set[str] = set()
        self._pack_ids: dict[bytes, bytes] = {}  # PACK_KEY prefix -> id of a present PACK object
        self._leases: dict[str, _Lease] = {}
        self.epoch_meta: MetaStore | None = None  # where writers read gc_epoch, when not here (a split store)
        self._ref_tags: dict[str, tuple[bytes | None, str | None]] = {}  # ref -> (value, etag) last seen
        self._counter_tags: dict[str, tuple[int, str]] = {}  # counter -> (value, etag) this handle wrote
        self._calm: dict[str, int] = {}  # counter -> < 0 while recently contended (see _counter_bump)
        self._holders: dict[str, str] = {}
        self._rows: dict[str, tuple[str, IndexRow]] = {}  # index key -> (etag, row)
        self._tested = False
        self._seen: dict[str, int] = {}  # highest counter values this handle wrote

    # -- opening -----------------------------------------------------------------------------------------

    @classmethod
    def open_url(cls, url: str) -> S3Backend:
        """Open the existing store at ``url``. Raises StoreNotFound when there is none."""
        b = cls(url)
        if b.meta_get("format_version") is None:
            raise StoreNotFound(f"{b.where}: no crewckpt store there; create one with `ckpt init {b.where}`")
        return b

    @classmethod
    def create(cls, url: str, meta: Mapping[str, str] | None = None) -> S3Backend:
        """Create a store at ``url`` (meta rows ``meta``; format_version written last, create-if-absent, so
        two racing creates cannot both succeed). Raises StoreExists, CkptError (bucket missing, no access)."""
        b = cls(url)
        b._check_writable()
        meta = dict(meta or {})
        if b.meta_get("format_version") is not None:
            raise StoreExists(f"{b.where}: a crewckpt store is already there; open it instead")
        last = meta.pop("format_version", None)
        for k, v in meta.items():
            b.meta_set(k, v)
        if last is not None:
            try:
                b._put(b.loc.key("meta", _q("format_version")), last.encode(), if_none_match=True)
            except botocore.exceptions.ClientError as e:
                if _is_conflict(e):
                    raise StoreExists(f"{b.where}: a crewckpt store is already there; open it instead") from None
                raise b._error("create the store", e) from None
        return b

    # -- requests ----------------------------------------------------------------------------------------

    def _error(self, what: str, e: Exception) -> CkptError:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if isinstance(e, botocore.exceptions.ClientError) and _code(e) == "NoSuchBucket":
            return StoreNotFound(f"{self.where}: bucket {self.loc.bucket!r} does not exist; create it first")
        return StoreWriteError(f"{self.where}: cannot {what} ({msg}); check the endpoint, bucket and "
                               f"credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE)")

    def _put(self, key: str, body: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        kw: dict[str, Any] = {"Bucket": self.loc.bucket, "Key": key, "Body": body}
        if if_none_match:
            kw["IfNoneMatch"] = "*"
        if if_match is not None:
            kw["IfMatch"] = if_match
        r = self.s3.put_object(**kw)
        return str(r.get("ETag", ""))

    def _get(self, key: str, range_: str | None = None) -> tuple[bytes, str] | None:
        r = self._read_call(key, self.s3.get_object, **({"Range": range_} if range_ else {}))
        return None if r is None else (r["Body"].read(), str(r.get("ETag", "")))

    def _read_call(self, key: str, op: Any, **kw: Any) -> Any:
        """``op(Bucket=..., Key=key, **kw)`` (a GET or HEAD); None when the key is missing."""
        try:
            return op(**{"Bucket": self.loc.bucket, "Key": key, **kw})
        except botocore.exceptions.ClientError as e:
            if _is_missing(e) and _code(e) != "NoSuchBucket":
                return None
            raise self._error(f"read {key}", e) from None
        except botocore.exceptions.BotoCoreError as e:
            raise self._error(f"read {key}", e) from None

    def _list(self, sub: str) -> list[tuple[str, str]]:
        """(key, etag) of every object under ``sub`` (a folder of the store), sorted by key."""
        base = self.loc.key(sub) + "/"
        out: list[tuple[str, str]] = []
        try:
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.loc.bucket, Prefix=base):
                out.extend((c["Key"], str(c.get("ETag", ""))) for c in page.get("Contents", ()))
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._error(f"list {base}", e) from None
        return sorted(out)

    def _delete(self, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            try:
                self.s3.delete_objects(Bucket=self.loc.bucket,
                                       Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
                raise self._error("delete objects", e) from None

    def _get_all(self, keys: list[str]) -> dict[str, tuple[bytes, str]]:
        if not keys:
            return {}
        if len(keys) == 1:
            got = self._get(keys[0])
            return {} if got is None else {keys[0]: got}
        with concurrent.futures.ThreadPoolExecutor(min(16, len(keys))) as ex:
            res = list(ex.map(self._get, keys))
        return {k: r for k, r in zip(keys, res, strict=True) if r is not None}

    # -- the write-time self-test ------------------------------------------------------------------------

    def _check_writable(self) -> None:
        """Before the first write: check that the server enforces conditional writes (once per bucket and
        endpoint per process). Raises StoreWriteError (one line) when it does not."""
        if self._tested:
            return
        key = (self.loc.endpoint, self.loc.bucket)
        with _self_test_lock:
            ok = _self_tested.get(key) if self.s3.__class__.__module__.startswith("botocore") else None
            if ok is None:
                ok = self._self_test()
                if self.s3.__class__.__module__.startswith("botocore"):
                    _self_tested[key] = ok
        if not ok:
            raise StoreWriteError(f"{self.where}: this S3 server ignores conditional writes (If-None-Match / "
                                  f"If-Match), so concurrent writers could lose checkpoints; refusing to write "
                                  f"(use AWS S3, SeaweedFS, MinIO or another server that enforces them)")
        self._tested = True

    def _self_test(self) -> bool:
        scratch = self.loc.key("selftest", uuid.uuid4().hex)
        barrier = threading.Barrier(SELF_TEST_WRITERS)

        def create(i: int) -> bool:
            barrier.wait(timeout=30)
            try:
                self._put(scratch, f"writer {i}".encode(), if_none_match=True)
                return True
            except botocore.exceptions.ClientError as e:
                if _is_conflict(e):
                    return False
                raise
        try:
            with concurrent.futures.ThreadPoolExecutor(SELF_TEST_WRITERS) as ex:
                wins = sum(ex.map(create, range(SELF_TEST_WRITERS)))
            if wins != 1:
                return False
            got = self._get(scratch)
            assert got is not None
            self._put(scratch, b"moved", if_match=got[1])
            try:
                self._put(scratch, b"stale", if_match=got[1])  # got[1] is stale now
                return False
            except botocore.exceptions.ClientError as e:
                if not _is_conflict(e):
                    raise
            return True
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._error("run the conditional-write self-test", e) from None
        finally:
            try:
                self._delete([scratch])
            except CkptError:
                pass

    # -- objects -----------------------------------------------------------------------------------------

    def _refresh(self) -> dict[bytes, _Loc]:
        """Load new pack indexes and ``dead/`` records; rebuild the view oid -> :class:`_Loc` of present
        objects. ``dead/`` is listed *before* ``packs/``: a view that lists a pack gc deletes later also holds
        the doomed record gc published before deleting it (docs/backends.md, 'Reclaiming space on S3')."""
        dead = [k for k, _ in self._list("dead")]
        packs = [k for k, _ in self._list("packs")]
        with self._lock:
            new_p = [k for k in packs if k not in self._packs]
            new_d = [k for k in dead if k not in self._dead]
        for k in new_p:
            got = self._read_pack_index(k)
            if got is not None:
                with self._lock:
                    self._packs[k] = got
        for k, (body, _) in self._get_all(new_d).items():
            rec = self._decode_dead(k, body)
            with self._lock:
                self._dead[k] = rec
        with self._lock:
            listed_p, listed_d = set(packs), set(dead)
            for k in set(self._packs) - listed_p:
                del self._packs[k]
            for k in set(self._dead) - listed_d:
                del self._dead[k]
            return self._rebuild()

    def _decode_dead(self, key: str, body: bytes) -> tuple[int, list[bytes], list[str]]:
        """A ``dead/`` record as ``(cutoff, ids, doomed packs)``: a tombstone ``[cutoff_ns, [oid...]]`` or a
        doomed record ``{"packs": [key...]}`` (cutoff -1). Anything else is another party's object.

        Raises:
            CorruptStore: naming the key and the way out (one line).
        """
        try:
            rec = msgpack.unpackb(body)
            if isinstance(rec, dict):  # a doomed record: packs a gc is about to delete
                packs = rec["packs"]
                if not isinstance(packs, list) or not all(isinstance(p, str) for p in packs):
                    raise ValueError("its pack list is not a list of keys")
                return (-1, [], list(packs))
            if not (isinstance(rec, list) and len(rec) == 2 and type(rec[0]) is int and isinstance(rec[1], list)
                    and all(isinstance(o, bytes) and len(o) == 32 for o in rec[1])):
                raise ValueError("not [cutoff, [object id...]]")
            return (rec[0], list(rec[1]), [])
        except (ValueError, TypeError, KeyError, msgpack.UnpackException) as e:
            raise CorruptStore(f"{self.where}: {key} is not a gc record crewckpt wrote ({_why(e)}); if no gc is "
                               f"running, delete that object, then run `ckpt fsck`") from None

    def _read_pack_index(self, key: str) -> tuple[int, list[_Entry]] | None:
        """(pack time, entries) of the pack at ``key``; None when it is gone.

        Raises:
            CorruptStore: the index is not one crewckpt wrote (one line naming the pack and the way out).
        """
        got = self._get(key, "bytes=0-65535")
        if got is None:
            return None
        head = got[0]
        try:
            (n,) = _HEAD.unpack_from(head)
            if 4 + n > len(head):
                full = self._get(key, f"bytes=0-{3 + n}")
                if full is None:
                    return None
                head = full[0]
            t, entries = msgpack.unpackb(head[4:4 + n])
            if type(t) is not int or not isinstance(entries, list):
                raise ValueError("not [time, [entry...]]")
            return t, [_entry(e, n, t) for e in entries]
        except (ValueError, TypeError, IndexError, struct.error, msgpack.UnpackException) as e:
            raise CorruptStore(f"{self.where}: pack {key} has a damaged index ({_why(e)}); move that object out "
                               f"of the store's prefix, then run `ckpt fsck` (it names what only that pack held)") \
                from None

    def _rebuild(self) -> dict[bytes, _Loc]:
        """The view from the cached packs and dead records (caller holds ``self._lock``). An object is present
        when some pack holds its frame and its newest put is at or after the newest cutoff naming it; its
        frame is read from the oldest pack holding one that no doomed record names (else the oldest)."""
        doomed = {p for _, _, ps in self._dead.values() for p in ps}
        touched: dict[bytes, int] = {}
        where: dict[bytes, _Loc] = {}
        for k in sorted(self._packs):
            gone = k in doomed
            for e in self._packs[k][1]:
                if e.t > touched.get(e.oid, -1):
                    touched[e.oid] = e.t
                if e.ln >= 0:
                    w = where.get(e.oid)
                    if w is None or (w.doomed and not gone):
                        where[e.oid] = _Loc(k, e.kind, e.size, e.off, e.ln, 0, e.head, gone)
        cut: dict[bytes, int] = {}
        for cutoff, oids, _ in self._dead.values():
            for o in oids:
                if cutoff > cut.get(o, -1):
                    cut[o] = cutoff
        view = {o: w._replace(touched=touched[o]) for o, w in where.items() if touched[o] >= cut.get(o, -1)}
        self._cut = cut
        self._doomed = doomed
        self._pack_ids = {o[:PACK_KEY]: o for o, w in view.items() if w.kind == ob.PACK}
        self._view = view
        return view

    def _lookup(self, oids: list[bytes]) -> dict[bytes, _Loc]:
        view = self._view
        if view is None or any(o not in view for o in oids):
            view = self._refresh()
        return {o: view[o] for o in oids if o in view}

    def get_many(self, oids: Iterable[bytes]) -> dict[bytes, StoredObject]:
        want = list(dict.fromkeys(oids))
        out = self._read(self._lookup(want))
        missing = [o for o in want if o not in out and self._view is not None and o in self._view]
        if missing:  # a pack our view listed is gone (a gc moved its frames): list again, read once more
            with self._lock:
                self._view = None
            out.update(self._read(self._lookup(missing)))
        return out

    def _read(self, found: dict[bytes, _Loc]) -> dict[bytes, StoredObject]:
        """Read the frames ``found`` locates (one ranged GET per pack); frames of a pack that is gone are
        missing from the result."""
        by_pack: dict[str, list[bytes]] = collections.defaultdict(list)
        for o, w in found.items():
            by_pack[w.pack].append(o)
        out: dict[bytes, StoredObject] = {}

        def read(pack: str) -> dict[bytes, StoredObject]:
            ids = by_pack[pack]
            lo = min(found[o].off for o in ids)
            hi = max(found[o].off + found[o].ln for o in ids)
            got = self._get(pack, f"bytes={lo}-{hi - 1}") if hi > lo else (b"", "")
            if got is None:
                return {}
            data = got[0]
            return {o: StoredObject(o, found[o].kind, found[o].size,
                                    data[found[o].off - lo:found[o].off - lo + found[o].ln]) for o in ids}
        packs = list(by_pack)
        if len(packs) <= 1:
            for p in packs:
                out.update(read(p))
        else:
            with concurrent.futures.ThreadPoolExecutor(min(16, len(packs))) as ex:
                for part in ex.map(read, packs):
                    out.update(part)
        return out

    def has_many(self, oids: Iterable[bytes]) -> set[bytes]:
        return set(self._lookup(list(oids)))

    def _reusable(self, view: dict[bytes, _Loc], w: _Loc) -> bytes | None | bool:
        """Whether a writer may skip or touch (not re-send) the present object at ``w``: False when its frame
        is only in a doomed pack, or its head is unknown, or it is a packed frame whose pack object is not
        present; else the id of that pack object (touched along with it), or None for an unpacked frame."""
        if w.doomed or w.head is None:
            return False
        if w.head[:1] == bytes([PACKED]) and len(w.head) == HEAD_BYTES:
            pack = self._pack_ids.get(bytes(w.head[1:1 + PACK_KEY]))
            return False if pack is None or view[pack].doomed else pack
        return None

    def put_many(self, objs: Iterable[StoredObject], now_ns: int) -> int:
        """One PUT of a new pack. Objects the view does not show are sent with their frame without listing
        again (a duplicate frame is harmless); whether a shown object is skipped or touched is decided after a
        listing of ``dead/`` made in this call and a HEAD of each pack relied on (T1-T3 in docs/backends.md,
        'Reclaiming space on S3')."""
        self._check_writable()
        batch = list({o.oid: o for o in objs}.values())
        if not batch:
            return 0
        with self._lock:
            view = self._view
        if view is None:
            view = self._refresh()
        elif any(o.oid in view for o in batch):
            view = self._recheck(view, [o.oid for o in batch if o.oid in view])
        entries: list[list[Any]] = []
        frames: list[bytes] = []
        off = new = 0
        touch: dict[bytes, _Loc] = {}
        for o in batch:
            w = view.get(o.oid)
            dep = self._reusable(view, w) if w is not None else False
            if w is not None and dep is not False:
                if w.touched < now_ns:
                    touch[o.oid] = w
                if isinstance(dep, bytes) and view[dep].touched < now_ns:
                    touch[dep] = view[dep]  # a touched member keeps the pack object its frame names
                continue
            entries.append([o.oid, o.kind, o.size, off, len(o.frame), o.frame[:HEAD_BYTES]])
            frames.append(o.frame)
            off += len(o.frame)
            new += 1
        sent = {e[0] for e in entries}
        entries.extend([oid, w.kind, w.size, 0, -1, None] for oid, w in touch.items() if oid not in sent)
        if not entries:
            return 0
        self._put_pack(now_ns, entries, frames, "store objects")
        return new

    def _recheck(self, view: dict[bytes, _Loc], seen: list[bytes]) -> dict[bytes, _Loc]:
        """Before skipping or touching ``seen`` (objects the cached view shows): list ``dead/`` (new tombstones
        and doomed records enter the view), then HEAD each pack those objects (and the PACK objects their
        frames name) are read from; a pack that is gone means a gc moved frames: list everything again."""
        dead = [k for k, _ in self._list("dead")]
        with self._lock:
            new_d = [k for k in dead if k not in self._dead]
            gone_d = set(self._dead) - set(dead)
        for k, (body, _) in self._get_all(new_d).items():
            rec = self._decode_dead(k, body)
            with self._lock:
                self._dead[k] = rec
        if new_d or gone_d:
            with self._lock:
                for k in gone_d:
                    self._dead.pop(k, None)
                view = self._rebuild()
        relied: set[str] = set()
        for o in seen:
            w = view.get(o)
            if w is None:
                continue
            relied.add(w.pack)
            dep = self._reusable(view, w)
            if isinstance(dep, bytes):
                relied.add(view[dep].pack)
        keys = sorted(relied)
        if len(keys) <= 1:
            there = [self._exists(k) for k in keys]
        else:
            with concurrent.futures.ThreadPoolExecutor(min(16, len(keys))) as ex:
                there = list(ex.map(self._exists, keys))
        return view if all(there) else self._refresh()

    def _exists(self, key: str) -> bool:
        return self._read_call(key, self.s3.head_object) is not None

    def _put_pack(self, now_ns: int, entries: list[list[Any]], frames: list[bytes], what: str) -> str:
        """PUT one pack (entries ``[oid, kind, size, offset, length, head(, time)]``) and add it to the view
        (no listing: our own pack is known)."""
        index = msgpack.packb([now_ns, entries])
        key = self.loc.key("packs", f"{now_ns:020d}-{uuid.uuid4().hex}")
        try:
            self._put(key, _HEAD.pack(len(index)) + index + b"".join(frames))
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._error(what, e) from None
        base = 4 + len(index)
        mine = [_entry(e, base - 4, now_ns) for e in entries]
        with self._lock:
            self._packs[key] = (now_ns, mine)
            if self._view is not None:
                self._note(key, mine)
        return key

    def _note(self, key: str, entries: list[_Entry]) -> None:
        """Add the entries of our pack ``key`` to the view (caller holds ``self._lock``)."""
        view = self._view
        assert view is not None
        for e in entries:
            w = view.get(e.oid)
            if w is not None:
                if e.ln >= 0 and w.doomed:
                    w = _Loc(key, e.kind, e.size, e.off, e.ln, w.touched, e.head, False)
                view[e.oid] = w._replace(touched=max(w.touched, e.t))
            elif e.ln >= 0 and e.t >= self._cut.get(e.oid, -1):
                view[e.oid] = _Loc(key, e.kind, e.size, e.off, e.ln, e.t, e.head, False)
                if e.kind == ob.PACK:
                    self._pack_ids[e.oid[:PACK_KEY]] = e.oid

    def iter_objects(self, prefix: bytes = b"") -> Iterator[ObjectMeta]:
        view = self._refresh()
        want = [o for o in view if o.startswith(prefix)]
        heads: dict[bytes, bytes] = {o: view[o].head for o in want if view[o].head is not None}  # type: ignore[misc]
        unknown = [o for o in want if o not in heads]  # packs written before heads were indexed
        for i in range(0, len(unknown), 5000):
            for o, s in self.get_many(unknown[i:i + 5000]).items():
                heads[o] = s.frame[:HEAD_BYTES]
        for o in want:
            if o in heads:
                w = view[o]
                yield ObjectMeta(o, w.kind, w.size, w.touched, heads[o], w.ln)

    def delete_objects(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        """Tombstone (one PUT) those of ``oids`` stored before ``touched_before_ns``. The tombstone holds the
        cutoff, not the delete time, so a put after the cutoff keeps its object whatever order the two
        requests reach the server in (the re-check is done by every reader). The bytes go when a gc
        reclaims space (:meth:`maintain`)."""
        self._check_writable()
        view = self._refresh()
        gone = [o for o in dict.fromkeys(oids) if o in view and view[o].touched < touched_before_ns]
        if not gone:
            return 0
        key = self.loc.key("dead", f"{time.time_ns():020d}-{uuid.uuid4().hex}")
        try:
            self._put(key, msgpack.packb([touched_before_ns, gone]))
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._error("delete objects", e) from None
        with self._lock:
            self._view = None
        return len(gone)

    # -- the gc lease and reclaiming space --------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, name: str = "gc", wait_s: float = 0.0) -> Iterator[bool]:
        """A lease ``locks/<name>`` taken by conditional write (``If-None-Match: *`` to create, ``If-Match`` to
        take over a released or expired one, to renew and to release), renewed every ``lease_s / 3`` by a
        thread while held. It dies with its holder ``lease_s`` seconds after the last renewal. Waits up to
        ``wait_s`` seconds, then yields False (:meth:`lock_holder` says who holds it)."""
        self._check_writable()
        lease = _Lease(self, name)
        got = lease.acquire(wait_s)
        if got:
            with self._lock:
                self._leases[name] = lease
        try:
            yield got
        finally:
            if got:
                with self._lock:
                    self._leases.pop(name, None)
                lease.release()

    def lock_holder(self, name: str = "gc") -> str | None:
        """Who held lease ``name`` when this handle last failed to take it, and until when (one phrase)."""
        return self._holders.get(name)

    def disk_bytes(self) -> int:
        """Bytes of every S3 object under the store's prefix (one listing): what the store costs at rest."""
        base = self.loc.key("") if self.loc.prefix else ""
        total = 0
        try:
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.loc.bucket, Prefix=base):
                total += sum(int(c.get("Size", 0)) for c in page.get("Contents", ()))
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._error(f"list {base}", e) from None
        return total

    def maintain(self, compact: bool = False) -> None:
        """gc's hook after its sweep: when this handle holds the gc lease, reclaim space (:meth:`reclaim`);
        otherwise (a writer finishing its run) nothing."""
        with self._lock:
            lease = self._leases.get("gc")
        if lease is not None:
            self.reclaim(lease)

    def reclaim(self, lease: _Lease) -> int:
        """Rewrite the packs that are mostly hidden or small into new packs and delete them, then drop dead
        records nothing needs; returns the packs deleted. Never changes what a reader sees as present: every
        object present at the plan (or revived by a writer meanwhile) keeps a frame and its stored time in a
        pack that stays. Order (docs/backends.md, 'Reclaiming space on S3', G7-G11): plan and copy, publish the
        doomed record, bump ``gc_epoch``, list again and copy what writers revived, check the lease, delete.

        Raises GcAborted (nothing deleted) when a frame to copy cannot be read or the lease was lost."""
        view = self._refresh()
        with self._lock:
            packs = dict(self._packs)
            old_doomed = {k: ps for k, (_, _, ps) in self._dead.items() if ps}
        doomed = self._reclaim_plan(view, packs) | {p for ps in old_doomed.values() for p in ps if p in packs}
        if not doomed:
            self._compact_dead(lease)
            return 0
        self._copy_out(view, packs, doomed, None)
        record = self.loc.key("dead", f"{time.time_ns():020d}-{uuid.uuid4().hex}")
        self._put_checked(record, msgpack.packb({"packs": sorted(doomed), "by": lease.owner}), "publish the "
                          "doomed packs")
        epochs = self.epoch_meta or self
        epochs.meta_set(_EPOCH, _next_epoch(epochs.meta_get(_EPOCH)))  # writers re-put what they reused (W6)
        if self.settle_s > 0:
            threading.Event().wait(self.settle_s)  # writers' touches decided before the record land first
        view = self._refresh()  # sees the record: what writers revived meanwhile now shows as doomed
        with self._lock:
            packs = dict(self._packs)
        self._copy_out(view, packs, doomed, view)
        lease.check()
        self._delete(sorted(doomed & set(packs)))
        self._delete([record, *old_doomed])
        with self._lock:
            self._view = None
        self._compact_dead(lease)
        return len(doomed & set(packs))

    def _reclaim_plan(self, view: dict[bytes, _Loc], packs: dict[str, tuple[int, list[_Entry]]]) -> set[str]:
        """Packs worth rewriting: those whose frames the view reads are under half their frame bytes, and, when
        there are at least two, the small ones (< SMALL_PACK bytes of frames: per-checkpoint packs, merged
        like git gc merges loose objects)."""
        sparse, small = set(), set()
        for k, (_, entries) in packs.items():
            total = sum(e.ln for e in entries if e.ln > 0)
            used = sum(e.ln for e in entries if e.ln > 0 and e.oid in view and view[e.oid].pack == k)
            if used * 2 < total or (total == 0 and not any(e.oid in view for e in entries)):
                sparse.add(k)
            elif total < SMALL_PACK:
                small.add(k)
        return sparse | (small if len(small) >= 2 else set())

    def _copy_out(self, view: dict[bytes, _Loc], packs: dict[str, tuple[int, list[_Entry]]], doomed: set[str],
                  only_new: dict[bytes, _Loc] | None) -> None:
        """Write new packs holding, for every present object with an entry in a doomed pack, its frame (when
        the view reads it from a doomed pack) or a touch, each with its stored time. ``only_new``: the second
        pass (after the record): copy only frames read from doomed packs (what the first pass did not)."""
        todo: dict[bytes, _Loc] = {}
        for k in doomed & set(packs):
            for e in packs[k][1]:
                w = view.get(e.oid)
                if w is not None and (only_new is None or w.doomed):
                    todo[e.oid] = w
        frames_from: dict[str, list[bytes]] = collections.defaultdict(list)
        for o, w in todo.items():
            if w.pack in doomed:
                frames_from[w.pack].append(o)
        got = self._read({o: todo[o] for ids in frames_from.values() for o in ids})
        unread = [o for ids in frames_from.values() for o in ids if o not in got]
        if unread:
            raise GcAborted(f"{self.where}: gc could not read object {unread[0].hex()} to move it out of a pack "
                            f"it reclaims; nothing was deleted; retry, and run `ckpt fsck` if it persists")
        entries: list[list[Any]] = []
        frames: list[bytes] = []
        off = 0
        for o, w in sorted(todo.items(), key=lambda x: (x[1].kind, x[0])):
            if o in got:
                fr = got[o].frame
                entries.append([o, w.kind, w.size, off, len(fr), fr[:HEAD_BYTES], w.touched])
                frames.append(fr)
                off += len(fr)
            elif only_new is None:
                entries.append([o, w.kind, w.size, 0, -1, None, w.touched])  # keeps its stored time
            if off >= COPY_PACK_MAX:
                self._put_pack(time.time_ns(), entries, frames, "copy live objects")
                entries, frames, off = [], [], 0
        if entries:
            self._put_pack(time.time_ns(), entries, frames, "copy live objects")

    def _compact_dead(self, lease: _Lease) -> None:
        """Merge tombstones into one, keeping only the ids some listed pack still holds an entry of; doomed
        records whose packs are all gone go too."""
        self._refresh()
        with self._lock:
            held = {e.oid for _, entries in self._packs.values() for e in entries}
            dead = dict(self._dead)
            packs = set(self._packs)
        tombs = {k: v for k, v in dead.items() if not v[2]}
        spent = [k for k, v in dead.items() if v[2] and not set(v[2]) & packs]
        keep: dict[bytes, int] = {}
        for cutoff, oids, _ in tombs.values():
            for o in oids:
                if o in held and cutoff > keep.get(o, -1):
                    keep[o] = cutoff
        if len(tombs) < 2 and all(o in keep for _, oids, _ in tombs.values() for o in oids) and not spent:
            return
        lease.check()
        if keep:
            by_cut: dict[int, list[bytes]] = collections.defaultdict(list)
            for o, c in keep.items():
                by_cut[c].append(o)
            for c, oids in sorted(by_cut.items()):
                self._put_checked(self.loc.key("dead", f"{time.time_ns():020d}-{uuid.uuid4().hex}"),
                                  msgpack.packb([c, oids]), "merge tombstones")
        self._delete(sorted(tombs) + spent)
        with self._lock:
            self._view = None

    def _put_checked(self, key: str, body: bytes, what: str) -> None:
        try:
            self._put(key, body)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._error(what, e) from None

    # -- refs --------------------------------------------------------------------------------------------

    def _read_ref(self, name: str) -> tuple[bytes | None, str | None, str | None]:
        """(value, etag, write id); etag None when the key was never written. Remembers (value, etag) for
        :meth:`set_ref_if_equals`."""
        got = self._get(self.loc.key("refs", _q(name)))
        if got is None:
            value, etag, w = None, None, None
        else:
            d = json.loads(got[0])
            value, etag, w = (bytes.fromhex(d["oid"]) if d.get("oid") else None), got[1], d.get("w")
        with self._lock:
            self._ref_tags[name] = (value, etag)
        return value, etag, w

    def get_ref(self, name: str) -> bytes | None:
        return self._read_ref(name)[0]

    def refs(self, prefix: str = "") -> dict[str, bytes]:
        base = self.loc.key("refs") + "/"
        keys = [k for k, _ in self._list("refs") if urllib.parse.unquote(k[len(base):]).startswith(prefix)]
        out = {}
        for k, (body, _) in self._get_all(keys).items():
            d = json.loads(body)
            if d.get("oid"):
                out[urllib.parse.unquote(k[len(base):])] = bytes.fromhex(d["oid"])
        return dict(sorted(out.items()))

    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes | None) -> None:
        """Compare-and-swap by one conditional PUT. When this handle's last read of ``name`` (or its last move)
        saw ``old``, its etag is used without reading again: every ref body holds a unique write id, so an
        ``If-Match`` on that etag succeeds only while the ref still holds exactly that body (no ABA). A stale
        etag fails the PUT; the ref is then read and the move retried once if it still holds ``old``."""
        self._check_writable()
        with self._lock:
            cached = self._ref_tags.get(name)
        if cached is not None and cached[0] == old:
            etag, fresh = cached[1], False
        else:
            cur, etag, _ = self._read_ref(name)
            if cur != old:
                raise ref_conflict(name, old, cur)
            fresh = True
        wid = uuid.uuid4().hex
        body = json.dumps({"oid": new.hex() if new else None, "w": wid}).encode()
        key = self.loc.key("refs", _q(name))
        for _ in range(2):
            try:
                tag = self._put(key, body, if_none_match=True) if etag is None else self._put(key, body, if_match=etag)
                with self._lock:
                    if tag:
                        self._ref_tags[name] = (new, tag)
                    else:  # a server that sends no ETag: read before the next move
                        self._ref_tags.pop(name, None)
                return
            except botocore.exceptions.ClientError as e:
                if not _is_conflict(e) and not _is_missing(e):
                    raise self._error(f"move ref {name}", e) from None
                found, etag, w = self._read_ref(name)
                if w == wid:  # our write landed; the response (or a retry of it) said otherwise
                    with self._lock:
                        self._ref_tags.pop(name, None)
                    return
                if found != old or fresh:
                    raise ref_conflict(name, old, found) from None
                fresh = True  # our etag was stale but the ref holds `old`: once more with the one just read
            except botocore.exceptions.BotoCoreError as e:
                found, _, w = self._read_ref(name)
                if w == wid:
                    with self._lock:
                        self._ref_tags.pop(name, None)
                    return
                raise self._error(f"move ref {name}", e) from None
        raise AssertionError("unreachable: the second try uses a fresh etag")  # pragma: no cover

    def reflog(self, ref: str) -> list[ReflogEntry]:
        keys = [k for k, _ in self._list(f"reflog/{_q(ref)}")]
        got = self._get_all(keys)
        out = []
        for k in keys:
            if k in got:
                d = msgpack.unpackb(got[k][0])
                out.append(ReflogEntry(ref, d[0] and bytes(d[0]), d[1] and bytes(d[1]), d[2], d[3]))
        return out

    def reflog_append(self, entry: ReflogEntry) -> None:
        self._check_writable()
        key = self.loc.key("reflog", _q(entry.ref), f"{time.time_ns():020d}-{_next_n():010d}-{uuid.uuid4().hex[:12]}")
        try:
            self._put(key, msgpack.packb([entry.old, entry.new, entry.time_ns, entry.message]))
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._error(f"append to the reflog of {entry.ref}", e) from None

    def reflog_delete(self, ref: str) -> None:
        self._delete([k for k, _ in self._list(f"reflog/{_q(ref)}")])

    def get_symref(self, name: str) -> str | None:
        got = self._get(self.loc.key("symrefs", _q(name)))
        return None if got is None else got[0].decode()

    def set_symref(self, name: str, target: str) -> None:
        self._plain_put(self.loc.key("symrefs", _q(name)), target.encode(), f"set {name}")

    def _plain_put(self, key: str, body: bytes, what: str) -> None:
        self._check_writable()
        try:
            self._put(key, body)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._error(what, e) from None

    # -- index, aliases, counters, meta --------------------------------------------------------------------

    @staticmethod
    def _row_body(r: IndexRow) -> bytes:
        return msgpack.packb([r.id, r.branch, r.seq, r.time_ns, r.run_id, r.trigger, list(r.parents), r.tree,
                              r.summary, r.alias, r.meta_json])

    @staticmethod
    def _row(body: bytes) -> IndexRow:
        d = msgpack.unpackb(body)
        return IndexRow(bytes(d[0]), d[1], d[2], d[3], d[4], d[5], tuple(bytes(p) for p in d[6]), bytes(d[7]),
                        bytes(d[8]), d[9], d[10])

    def index_get(self, cid: bytes) -> IndexRow | None:
        got = self._get(self.loc.key("index", cid.hex()))
        return None if got is None else self._row(got[0])

    def index_rows(self, branch: str | None = None) -> list[IndexRow]:
        listed = dict(self._list("index"))
        with self._lock:
            stale = [k for k, e in listed.items() if self._rows.get(k, ("", None))[0] != e]
        got = self._get_all(stale)
        with self._lock:
            for k, (body, etag) in got.items():
                self._rows[k] = (etag, self._row(body))
            for k in set(self._rows) - set(listed):
                del self._rows[k]
            rows = [r for k, (_, r) in self._rows.items() if k in listed and (branch is None or r.branch == branch)]
        return sorted(rows, key=lambda r: (r.seq, r.time_ns, r.id))

    def index_add(self, row: IndexRow) -> None:
        self._check_writable()
        if row.seq > self._seen.get("seq", 0):  # a seq not from our counter_next (a rebuild, a test):
            self._counter_bump("seq", row.seq)  # keep "seq" above every seq in the index
        try:
            self._put(self.loc.key("index", row.id.hex()), self._row_body(row), if_none_match=True)
        except botocore.exceptions.ClientError as e:
            if not _is_conflict(e):  # present: idempotent, the existing row stays
                raise self._error("add an index row", e) from None
        except botocore.exceptions.BotoCoreError as e:
            raise self._error("add an index row", e) from None

    def index_remove(self, ids: Iterable[bytes]) -> int:
        keys = [self.loc.key("index", i.hex()) for i in dict.fromkeys(ids)]
        listed = dict(self._list("index"))
        there = [k for k in keys if k in listed]
        self._delete(there)
        return len(there)

    def index_rebranch(self, old: str, new: str) -> None:
        for r in self.index_rows(old):
            self._plain_put(self.loc.key("index", r.id.hex()),
                            self._row_body(IndexRow(r.id, new, r.seq, r.time_ns, r.run_id, r.trigger, r.parents,
                                                    r.tree, r.summary, r.alias, r.meta_json)), "rebranch")

    def index_renumber(self, seqs: Mapping[bytes, int]) -> int:
        self._check_writable()
        n = 0
        for cid, seq in seqs.items():  # in the given order (the contract); each row rewritten in place
            key = self.loc.key("index", cid.hex())
            for _ in range(50):
                got = self._get(key)
                if got is None:
                    break  # pruned meanwhile: never bring a row back
                r = self._row(got[0])
                if r.seq == seq:
                    break
                if seq > self._seen.get("seq", 0):
                    self._counter_bump("seq", seq)
                try:  # conditional on the row read, so a concurrent prune or rename is not undone
                    self._put(key, self._row_body(dataclasses.replace(r, seq=seq)), if_match=got[1])
                    n += 1
                    break
                except botocore.exceptions.ClientError as e:
                    if not _is_conflict(e):
                        raise self._error("renumber an index row", e) from None
                except botocore.exceptions.BotoCoreError as e:
                    raise self._error("renumber an index row", e) from None
        return n

    def alias_get(self, alias: str) -> bytes | None:
        got = self._get(self.loc.key("alias", _q(alias)))
        return None if got is None else got[0]

    def alias_set(self, alias: str, cid: bytes) -> None:
        self._check_writable()
        try:
            self._put(self.loc.key("alias", _q(alias)), cid, if_none_match=True)
        except botocore.exceptions.ClientError as e:
            if not _is_conflict(e):  # first writer wins
                raise self._error("set an alias", e) from None

    def alias_forget(self, cids: Iterable[bytes]) -> int:
        gone = set(cids)
        keys = [k for k, _ in self._list("alias")]
        drop = [k for k, (body, _) in self._get_all(keys).items() if body in gone]
        self._delete(drop)
        return len(drop)

    def counter_next(self, name: str) -> int:
        self._check_writable()
        return self._counter_bump(name, None)

    def _counter_bump(self, name: str, floor: int | None) -> int:
        """Advance counter ``name`` by one (``floor`` None) or raise it to at least ``floor``, by a
        conditional-write loop; returns its new value. The first try uses the value and etag of this
        handle's last write (no GET: a counter's values only grow, so an etag names one state)."""
        key = self.loc.key("counters", _q(name))
        with self._lock:
            calm = self._calm.get(name, 0) >= 0
            mine = self._counter_tags.pop(name, None) if floor is None and calm else None
        first = True
        for _ in range(200):
            got: tuple[bytes, str] | None
            if mine is not None:
                got, mine = (str(mine[0]).encode(), mine[1]), None
            else:
                got = self._get(key)
            cur = int(got[0]) if got else 0
            nxt = cur + 1 if floor is None else max(cur, floor)
            if nxt == cur:
                return cur
            try:
                if got is None:
                    tag = self._put(key, str(nxt).encode(), if_none_match=True)
                else:
                    tag = self._put(key, str(nxt).encode(), if_match=got[1])
                with self._lock:
                    self._seen[name] = max(self._seen.get(name, 0), nxt)
                    # a counter other writers move (a lost first try) is read before each write for the next
                    # 16 advances; a calm one skips the read
                    self._calm[name] = min(self._calm.get(name, 0) + 1, 0) if first else -16
                    if tag:
                        self._counter_tags[name] = (nxt, tag)
                return nxt
            except botocore.exceptions.ClientError as e:
                if not (_is_conflict(e) or _is_missing(e)):
                    raise self._error(f"advance counter {name}", e) from None
                first = False
        raise StoreWriteError(f"{self.where}: counter {name} kept moving under 200 tries; retry")

    def meta_get(self, key: str) -> str | None:
        got = self._get(self.loc.key("meta", _q(key)))
        return None if got is None else got[0].decode()

    def meta_set(self, key: str, value: str) -> None:
        self._plain_put(self.loc.key("meta", _q(key)), value.encode(), f"set meta {key}")

    def close(self) -> None:
        """Drop the caches and release any lease this handle holds (the client's connections close with it)."""
        with self._lock:
            leases = list(self._leases.values())
            self._leases.clear()
        for lease in leases:
            lease.release()
        with self._lock:
            self._packs.clear()
            self._dead.clear()
            self._view = None

    def object_stats(self) -> tuple[int, int, int]:
        view = self._refresh()
        return len(view), sum(max(v.size, 0) for v in view.values()), sum(v.ln for v in view.values())

def _next_epoch(current: str | None) -> str:
    text = (current or "0").strip()
    return str(int(text) + 1) if text.isdigit() and len(text) < 30 else str(time.time_ns())


def _utc(ns: int) -> str:
    """``ns`` since the epoch as a UTC time, or "the far future" past what datetime can show."""
    try:
        return datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, ValueError, OSError):
        return "the far future"


def _why(e: Exception) -> str:
    """A short reason for a decode failure, on one line."""
    text = " ".join(str(e).split())[:120]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _entry(e: Any, n: int, t: int) -> _Entry:
    """One pack index entry ``[oid, kind, size, offset, length, head?, time?]`` (offsets relative to the end
    of the ``n``-byte index); raises ValueError on any other shape."""
    if not (isinstance(e, list) and 5 <= len(e) <= 7 and isinstance(e[0], bytes) and len(e[0]) == 32
            and all(type(x) is int for x in e[1:5]) and (len(e) <= 5 or e[5] is None or isinstance(e[5], bytes))
            and (len(e) <= 6 or type(e[6]) is int)):
        raise ValueError("an entry is not [id, kind, size, offset, length, head, time]")
    if e[4] >= 0 and (e[3] < 0 or e[2] < 0):
        raise ValueError("an entry has a negative offset or size")
    return _Entry(e[0], e[1], e[2], e[3] + 4 + n if e[4] >= 0 else -1, e[4],
                  e[5] if len(e) > 5 else None, e[6] if len(e) > 6 else t)


class _Lease:
    """One holder's lease on ``locks/<name>`` (see :meth:`S3Backend.lock`)."""

    def __init__(self, backend: S3Backend, name: str) -> None:
        self.b = backend
        self.name = name
        self.key = backend.loc.key("locks", _q(name))
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.etag: str | None = None
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._mu = threading.Lock()  # one conditional write at a time: each needs the etag of the last

    def _body(self, held: bool) -> bytes:
        return json.dumps({"owner": self.owner, "held": held,
                           "expires_ns": time.time_ns() + int(self.b.lease_s * 1e9)}).encode()

    def _url(self) -> str:
        return f"s3://{self.b.loc.bucket}/{self.key}"

    def _state(self, body: bytes) -> tuple[bool, int, str]:
        """``(held, expires_ns, owner)`` of a lease body ``{"owner", "held", "expires_ns"}``.

        Raises:
            StoreWriteError: the body is not a lease crewckpt wrote (one line naming the key and the way out).
        """
        try:
            d = json.loads(body)
            if not (isinstance(d, dict) and isinstance(d.get("held"), bool) and type(d.get("expires_ns")) is int
                    and isinstance(d.get("owner"), str)):
                raise ValueError('not {"owner": str, "held": bool, "expires_ns": int}')
        except ValueError as e:
            raise StoreWriteError(f"{self.b.where}: the {self.name} lease {self._url()} is not one crewckpt wrote "
                                  f"({_why(e)}); if no gc is running, delete it and retry") from None
        return d["held"], d["expires_ns"], " ".join(d["owner"].split())[:80]

    def acquire(self, wait_s: float) -> bool:
        deadline = time.monotonic() + wait_s
        pause = 0.02
        while True:
            got = self.b._get(self.key)
            try:
                if got is None:
                    self.etag = self.b._put(self.key, self._body(True), if_none_match=True)
                else:
                    held, expires_ns, owner = self._state(got[0])
                    if held and expires_ns > time.time_ns():
                        self.b._holders[self.name] = (f"held by {owner} until {_utc(expires_ns)} unless renewed; "
                                                      f"if no gc is running, delete {self._url()}")
                        if time.monotonic() >= deadline:
                            return False
                        threading.Event().wait(min(pause, max(deadline - time.monotonic(), 0.0)))
                        pause = min(pause * 2, 1.0)
                        continue
                    self.etag = self.b._put(self.key, self._body(True), if_match=got[1])  # released or expired
            except botocore.exceptions.ClientError as e:
                if _is_conflict(e) or _is_missing(e):
                    continue  # another taker won this round: read again
                raise self.b._error(f"take the {self.name} lease", e) from None
            except botocore.exceptions.BotoCoreError as e:
                raise self.b._error(f"take the {self.name} lease", e) from None
            self._thread = threading.Thread(target=self._renew, name=f"crewckpt-s3-lease-{self.name}", daemon=True)
            self._thread.start()
            return True

    def _renew(self) -> None:
        while not self._stop.wait(self.b.lease_s / 3):
            try:
                with self._mu:
                    self.etag = self.b._put(self.key, self._body(True), if_match=self.etag)
            except botocore.exceptions.ClientError as e:
                if _is_conflict(e) or _is_missing(e):
                    self.lost = "another holder took it over after it expired"
                    return
            except botocore.exceptions.BotoCoreError:
                pass  # a transient failure: the next renewal retries; check() judges the expiry

    def check(self) -> None:
        """Raise GcAborted when the lease was lost (another gc may run): called before every delete."""
        if self.lost is None:
            try:
                with self._mu:
                    self.etag = self.b._put(self.key, self._body(True), if_match=self.etag)
            except botocore.exceptions.ClientError as e:
                if not (_is_conflict(e) or _is_missing(e)):
                    raise self.b._error(f"renew the {self.name} lease", e) from None
                self.lost = "another holder took it over after it expired"
            except botocore.exceptions.BotoCoreError as e:
                raise self.b._error(f"renew the {self.name} lease", e) from None
        if self.lost is not None:
            raise GcAborted(f"{self.b.where}: the {self.name} lease was lost ({self.lost}); this gc stopped "
                            f"before deleting; rerun it")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.lost is None and self.etag is not None:
            try:
                body = json.dumps({"owner": self.owner, "held": False, "expires_ns": 0}).encode()
                self.b._put(self.key, body, if_match=self.etag)
            except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError):
                pass  # it expires on its own


class S3Opener(Opener):
    """``s3://bucket/prefix?endpoint=...&region=...``."""

    label = "S3"

    def identity(self, loc: Location) -> str:
        return S3Location(loc.target).identity

    def open(self, loc: Location) -> Opened:
        b = S3Backend.open_url(loc.target)
        return Opened(b, b.where)

    def create(self, loc: Location, meta: Mapping[str, str], *, private: bool) -> Opened:
        b = S3Backend.create(loc.target, meta)
        return Opened(b, b.where)


OPENER = S3Opener()


__all__ = ["OPENER", "S3Backend", "S3Location", "S3Opener"]
