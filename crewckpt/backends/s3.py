"""S3 backend: a store on any S3-compatible object storage (AWS S3, SeaweedFS, MinIO...), chosen by
``s3://bucket/prefix?endpoint=http://host:port&region=us-east-1`` (credentials the usual AWS way: environment
variables, profile, instance role). Needs the ``crewckpt[s3]`` extra (boto3).

Layout under ``prefix`` (every key below is an S3 object; docs/backends.md, 'S3'):

* ``packs/<time_ns>-<rand>``: one PUT per :meth:`put_many` batch (one per checkpoint): a msgpack index
  ``[(oid, kind, size, offset, length), ...]`` behind a 4-byte length, then the frames. An entry with
  length -1 is a *touch*: the object is present elsewhere and its stored time becomes the pack's time.
  Readers list the pack indexes once and refresh the listing on a miss.
* ``dead/<time_ns>-<rand>``: gc's deletions, as tombstones ``(cutoff, [oid...])``. An object is present when
  some pack holds its frame and its newest put (pack time) is at or after the newest cutoff naming it: a
  writer that puts an object again after gc decided keeps it, whatever order the two requests land in.
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
import dataclasses
import json
import struct
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import boto3  # type: ignore[import-untyped]  # the extra: ImportError here becomes "pip install 'crewckpt[s3]'" (registry)
import botocore.config  # type: ignore[import-untyped]
import botocore.exceptions  # type: ignore[import-untyped]
import msgpack

from crewckpt.backends.base import (
    HEAD_BYTES,
    Backend,
    Capabilities,
    IndexRow,
    ObjectMeta,
    ReflogEntry,
    StoredObject,
    ref_conflict,
)
from crewckpt.backends.registry import Location, Opened, Opener
from crewckpt.errors import BadLocation, CkptError, StoreExists, StoreNotFound, StoreWriteError

GC_GRACE_S = 300.0  # stored times come from each writer's clock: a grace above the clock skew between machines
SELF_TEST_WRITERS = 6
_CONFLICT_CODES = {"PreconditionFailed", "ConditionalRequestConflict", "412", "409", "OperationAborted"}
_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}
_HEAD = struct.Struct(">I")


class S3Location:
    """A parsed ``s3://bucket/prefix?endpoint=...&region=...`` location."""

    def __init__(self, url: str) -> None:
        p = urllib.parse.urlsplit(url)
        if p.scheme.lower() != "s3" or not p.netloc:
            raise BadLocation(f"{url}: an S3 location is s3://bucket/prefix?endpoint=http://host:port&region=...")
        q = dict(urllib.parse.parse_qsl(p.query, keep_blank_values=True))
        unknown = set(q) - {"endpoint", "region"}
        if unknown:
            raise BadLocation(f"{url}: unknown S3 location option(s) {', '.join(sorted(unknown))}; "
                              f"only endpoint= and region= are known")
        self.bucket = p.netloc
        self.prefix = p.path.strip("/")
        self.endpoint = q.get("endpoint") or None
        self.region = q.get("region") or None
        query = urllib.parse.urlencode({k: v for k, v in (("endpoint", self.endpoint), ("region", self.region))
                                        if v})
        self.identity = f"s3://{self.bucket}/{self.prefix}" + (f"?{query}" if query else "")

    def key(self, *parts: str) -> str:
        """The object key of ``parts`` under the store's prefix."""
        return "/".join([self.prefix, *parts] if self.prefix else parts)


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


class S3Backend(Backend):
    """A store under one bucket prefix. Thread-safe (boto3 clients are); several processes and machines may
    share one store (``shared``); no transactions, no locks: the store follows the ordering invariants."""

    capabilities = Capabilities(transactions=False, locks=False, cheap_listing=False, reframe=False, shared=True,
                                persistent=True, gc_grace_s=GC_GRACE_S)

    def __init__(self, location: str | S3Location, *, client: Any = None, gc_grace_s: float = GC_GRACE_S) -> None:
        """``client``: a boto3 S3 client to use (tests wrap one); default: one from the location and the usual
        AWS credentials. ``gc_grace_s``: see :attr:`capabilities`."""
        if gc_grace_s != GC_GRACE_S:
            self.capabilities = Capabilities(transactions=False, locks=False, cheap_listing=False, reframe=False,
                                             shared=True, persistent=True, gc_grace_s=gc_grace_s)
        self.loc = location if isinstance(location, S3Location) else S3Location(location)
        self.where = self.loc.identity
        self.s3 = client if client is not None else boto3.client(
            "s3", endpoint_url=self.loc.endpoint, region_name=self.loc.region,
            config=botocore.config.Config(retries={"max_attempts": 4, "mode": "standard"},
                                          max_pool_connections=32, s3={"addressing_style": "path"}))
        self._lock = threading.Lock()
        self._packs: dict[str, tuple[int, list[tuple[bytes, int, int, int, int]]]] = {}
        self._dead: dict[str, tuple[int, list[bytes]]] = {}
        self._view: dict[bytes, tuple[str, int, int, int, int, int]] | None = None  # oid -> where + touched
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
        kw: dict[str, Any] = {"Bucket": self.loc.bucket, "Key": key}
        if range_:
            kw["Range"] = range_
        try:
            r = self.s3.get_object(**kw)
        except botocore.exceptions.ClientError as e:
            if _is_missing(e) and _code(e) != "NoSuchBucket":
                return None
            raise self._error(f"read {key}", e) from None
        except botocore.exceptions.BotoCoreError as e:
            raise self._error(f"read {key}", e) from None
        return r["Body"].read(), str(r.get("ETag", ""))

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

    def _refresh(self) -> dict[bytes, tuple[str, int, int, int, int, int]]:
        """Load new pack indexes and tombstones; rebuild the view oid -> (pack, kind, size, off, len, touched)."""
        packs = [k for k, _ in self._list("packs")]
        dead = [k for k, _ in self._list("dead")]
        with self._lock:
            new_p = [k for k in packs if k not in self._packs]
            new_d = [k for k in dead if k not in self._dead]
        for k in new_p:
            got = self._get(k, "bytes=0-65535")
            if got is None:
                continue
            head = got[0]
            (n,) = _HEAD.unpack_from(head)
            if 4 + n > len(head):
                full = self._get(k, f"bytes=0-{3 + n}")
                if full is None:
                    continue
                head = full[0]
            t, entries = msgpack.unpackb(head[4:4 + n])
            with self._lock:
                self._packs[k] = (t, [(bytes(e[0]), e[1], e[2], e[3] + 4 + n if e[4] >= 0 else -1, e[4])
                                      for e in entries])
        for k, (body, _) in self._get_all(new_d).items():
            cutoff, oids = msgpack.unpackb(body)
            with self._lock:
                self._dead[k] = (cutoff, [bytes(o) for o in oids])
        with self._lock:
            for k in set(self._packs) - set(packs):
                del self._packs[k]
            for k in set(self._dead) - set(dead):
                del self._dead[k]
            touched: dict[bytes, int] = {}
            where: dict[bytes, tuple[str, int, int, int, int]] = {}
            for k, (t, entries) in self._packs.items():
                for oid, kind, size, off, ln in entries:
                    if t > touched.get(oid, -1):
                        touched[oid] = t
                    if ln >= 0:
                        where.setdefault(oid, (k, kind, size, off, ln))
            cut: dict[bytes, int] = {}
            for cutoff, oids in self._dead.values():
                for o in oids:
                    cut[o] = max(cut.get(o, -1), cutoff)
            view = {o: (*w, touched[o]) for o, w in where.items() if touched[o] >= cut.get(o, -1)}
            self._view = view
            return view

    def _lookup(self, oids: list[bytes]) -> dict[bytes, tuple[str, int, int, int, int, int]]:
        view = self._view
        if view is None or any(o not in view for o in oids):
            view = self._refresh()
        return {o: view[o] for o in oids if o in view}

    def get_many(self, oids: Iterable[bytes]) -> dict[bytes, StoredObject]:
        want = list(dict.fromkeys(oids))
        found = self._lookup(want)
        by_pack: dict[str, list[bytes]] = collections.defaultdict(list)
        for o, w in found.items():
            by_pack[w[0]].append(o)
        out: dict[bytes, StoredObject] = {}

        def read(pack: str) -> dict[bytes, StoredObject]:
            ids = by_pack[pack]
            lo = min(found[o][3] for o in ids)
            hi = max(found[o][3] + found[o][4] for o in ids)
            got = self._get(pack, f"bytes={lo}-{hi - 1}") if hi > lo else (b"", "")
            if got is None:
                return {}
            data = got[0]
            return {o: StoredObject(o, found[o][1], found[o][2], data[found[o][3] - lo:found[o][3] - lo + found[o][4]])
                    for o in ids}
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

    def put_many(self, objs: Iterable[StoredObject], now_ns: int) -> int:
        self._check_writable()
        batch = list({o.oid: o for o in objs}.values())
        if not batch:
            return 0
        present = self._lookup([o.oid for o in batch])
        entries: list[list[Any]] = []
        frames: list[bytes] = []
        off = new = 0
        for o in batch:
            if o.oid in present:
                if present[o.oid][5] < now_ns:
                    entries.append([o.oid, o.kind, o.size, 0, -1])  # a touch: stored time becomes now_ns
            else:
                entries.append([o.oid, o.kind, o.size, off, len(o.frame)])
                frames.append(o.frame)
                off += len(o.frame)
                new += 1
        if not entries:
            return 0
        index = msgpack.packb([now_ns, entries])
        key = self.loc.key("packs", f"{now_ns:020d}-{uuid.uuid4().hex}")
        try:
            self._put(key, _HEAD.pack(len(index)) + index + b"".join(frames))
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as e:
            raise self._error("store objects", e) from None
        with self._lock:
            self._view = None  # our pack is listed on the next look-up
        return new

    def iter_objects(self, prefix: bytes = b"") -> Iterator[ObjectMeta]:
        view = self._refresh()
        heads: dict[bytes, bytes] = {}
        want = [o for o in view if o.startswith(prefix)]
        for i in range(0, len(want), 5000):
            for o, s in self.get_many(want[i:i + 5000]).items():
                heads[o] = s.frame[:HEAD_BYTES]
        for o in want:
            if o in heads:
                _, kind, size, _, ln, touched = view[o]
                yield ObjectMeta(o, kind, size, touched, heads[o], ln)

    def delete_objects(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        """Tombstone (one PUT) those of ``oids`` stored before ``touched_before_ns``. The tombstone holds the
        cutoff, not the delete time, so a put after the cutoff keeps its object whatever order the two
        requests reach the server in (the re-check is done by every reader)."""
        self._check_writable()
        view = self._refresh()
        gone = [o for o in dict.fromkeys(oids) if o in view and view[o][5] < touched_before_ns]
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

    # -- refs --------------------------------------------------------------------------------------------

    def _read_ref(self, name: str) -> tuple[bytes | None, str | None, str | None]:
        """(value, etag, write id); etag None when the key was never written."""
        got = self._get(self.loc.key("refs", _q(name)))
        if got is None:
            return None, None, None
        d = json.loads(got[0])
        return (bytes.fromhex(d["oid"]) if d.get("oid") else None), got[1], d.get("w")

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
        self._check_writable()
        cur, etag, _ = self._read_ref(name)
        if cur != old:
            raise ref_conflict(name, old, cur)
        wid = uuid.uuid4().hex
        body = json.dumps({"oid": new.hex() if new else None, "w": wid}).encode()
        key = self.loc.key("refs", _q(name))
        try:
            if etag is None:
                self._put(key, body, if_none_match=True)
            else:
                self._put(key, body, if_match=etag)
        except botocore.exceptions.ClientError as e:
            if not _is_conflict(e) and not _is_missing(e):
                raise self._error(f"move ref {name}", e) from None
            found, _, w = self._read_ref(name)
            if w == wid:  # our write landed; the response (or a retry of it) said otherwise
                return
            raise ref_conflict(name, old, found) from None
        except botocore.exceptions.BotoCoreError as e:
            found, _, w = self._read_ref(name)
            if w == wid:
                return
            raise self._error(f"move ref {name}", e) from None

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
        conditional-write loop; returns its new value."""
        key = self.loc.key("counters", _q(name))
        for _ in range(200):
            got = self._get(key)
            cur = int(got[0]) if got else 0
            nxt = cur + 1 if floor is None else max(cur, floor)
            if nxt == cur:
                return cur
            try:
                if got is None:
                    self._put(key, str(nxt).encode(), if_none_match=True)
                else:
                    self._put(key, str(nxt).encode(), if_match=got[1])
                with self._lock:
                    self._seen[name] = max(self._seen.get(name, 0), nxt)
                return nxt
            except botocore.exceptions.ClientError as e:
                if not (_is_conflict(e) or _is_missing(e)):
                    raise self._error(f"advance counter {name}", e) from None
        raise StoreWriteError(f"{self.where}: counter {name} kept moving under 200 tries; retry")

    def meta_get(self, key: str) -> str | None:
        got = self._get(self.loc.key("meta", _q(key)))
        return None if got is None else got[0].decode()

    def meta_set(self, key: str, value: str) -> None:
        self._plain_put(self.loc.key("meta", _q(key)), value.encode(), f"set meta {key}")

    def close(self) -> None:
        """Drop the caches (the client's connections close with it)."""
        self._packs.clear()
        self._dead.clear()
        self._view = None

    def object_stats(self) -> tuple[int, int, int]:
        view = self._refresh()
        return len(view), sum(max(v[2], 0) for v in view.values()), sum(v[4] for v in view.values())


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
