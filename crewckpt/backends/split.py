"""Refs, reflogs, the commit index and meta in PostgreSQL; object bodies in S3 (lakeFS's split): a store for
fleets whose checkpoints are big. Location::

    pg+s3://user[:password]@host[:port]/db?schema=NAME&objects=s3://bucket/prefix&endpoint=http://h:p&region=r

``objects``, ``endpoint`` and ``region`` name the S3 part (as in an ``s3://`` location); every other query
parameter belongs to the PostgreSQL part (``schema``, libpq options). Needs both extras
(``crewckpt[postgres,s3]``).

The contract's four parts are separate interfaces, so the backend delegates: objects to an
:class:`~crewckpt.backends.s3.S3Backend` (its pack layout, tombstones, gc lease and reclaiming, unchanged),
refs / index / meta to a :class:`~crewckpt.backends.postgres.PgBackend`. What the split gives up is one
transaction over a checkpoint: object PUTs cannot join a PostgreSQL transaction, so ``transactions`` is
false and the Store follows the write order of docs/backends.md (each PostgreSQL verb its own transaction;
a crash between steps leaves garbage objects or a missing index row, as on S3). ``gc_epoch`` lives in
PostgreSQL (the S3 part bumps it there when it reclaims space), the gc lease in S3 (reclaiming checks it
before every delete).
"""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping

from crewckpt.backends.base import (
    Backend,
    Capabilities,
    IndexRow,
    ObjectMeta,
    ReflogEntry,
    StoredObject,
)
from crewckpt.backends.postgres import PgBackend, parse_location
from crewckpt.backends.registry import Location, Opened, Opener, redact, repeated_key
from crewckpt.backends.s3 import GC_GRACE_S, S3Backend, S3Location
from crewckpt.errors import BadLocation, StoreNotFound

_S3_KEYS = ("objects", "endpoint", "region")


def split_location(url: str) -> tuple[str, str]:
    """(postgresql:// URL, s3:// URL) of a ``pg+s3://`` location. Raises BadLocation (one line)."""
    p = urllib.parse.urlsplit(url)
    if p.scheme.lower() != "pg+s3":
        raise BadLocation(f"{redact(url)}: a split location is pg+s3://host/db?schema=NAME&objects=s3://bucket/prefix")
    twice = repeated_key(p.query)
    if twice is not None:  # the dict below would silently keep the last one
        raise BadLocation(f"{redact(url)}: {twice}= is given more than once; give it once")
    query = urllib.parse.parse_qsl(p.query, keep_blank_values=True)
    s3 = {k: v for k, v in query if k in _S3_KEYS}
    objects = s3.get("objects", "")
    if not objects.lower().startswith("s3://") or "?" in objects:
        raise BadLocation(f"{_redact(url)}: objects= must name the S3 part as s3://bucket/prefix "
                          f"(endpoint= and region= go beside it), e.g. pg+s3://host/db?schema=crewckpt&"
                          f"objects=s3://bucket/ckpt&endpoint=http://127.0.0.1:8333")
    s3_query = urllib.parse.urlencode({k: s3[k] for k in ("endpoint", "region") if s3.get(k)})
    pg_query = urllib.parse.urlencode([(k, v) for k, v in query if k not in _S3_KEYS])
    pg = urllib.parse.urlunsplit(("postgresql", p.netloc, p.path, pg_query, ""))
    return pg, objects + (f"?{s3_query}" if s3_query else "")


def _redact(url: str) -> str:
    """``url`` with its secrets masked (for messages; :func:`crewckpt.backends.registry.redact`)."""
    return redact(url)


def identity(url: str) -> str:
    """The canonical spelling of a ``pg+s3://`` location (no password; the parts' own identities)."""
    pg, s3 = split_location(url)
    pg_id = urllib.parse.urlsplit(parse_location(pg).identity)
    s3_loc = S3Location(s3)
    query = pg_id.query + f"&objects=s3://{s3_loc.bucket}/{s3_loc.prefix}"
    for k, v in (("endpoint", s3_loc.endpoint), ("region", s3_loc.region)):
        if v:
            query += f"&{k}={v}"
    return urllib.parse.urlunsplit(("pg+s3", pg_id.netloc, pg_id.path, query, ""))


class SplitBackend(Backend):
    """Objects in S3, everything else in PostgreSQL (module docstring). ``meta`` is the PostgreSQL part,
    ``objects`` the S3 part; both are closed with this backend."""

    def __init__(self, meta: PgBackend, objects: S3Backend, where: str) -> None:
        self.meta, self.objects, self.where = meta, objects, where
        objects.epoch_meta = meta  # reclaiming bumps the gc_epoch writers read (PostgreSQL's)
        self.capabilities = Capabilities(transactions=False, locks=True, cheap_listing=False, reframe=False,
                                         shared=True, persistent=True,
                                         gc_grace_s=objects.capabilities.gc_grace_s)

    @classmethod
    def open_url(cls, url: str, *, gc_grace_s: float = GC_GRACE_S) -> SplitBackend:
        """Open the store at ``url``. Raises StoreNotFound, BadLocation, CkptError (unreachable server)."""
        pg, s3 = split_location(url)
        meta = PgBackend.open(pg)
        return cls(meta, S3Backend(s3, gc_grace_s=gc_grace_s), identity(url))

    @classmethod
    def create(cls, url: str, meta: Mapping[str, str] | None = None, *,
               gc_grace_s: float = GC_GRACE_S) -> SplitBackend:
        """Create the PostgreSQL part (its schema and meta rows, one transaction); the S3 part needs no setup
        beyond a writable bucket (checked first, so a bad bucket creates nothing). Raises StoreExists."""
        pg, s3 = split_location(url)
        objects = S3Backend(s3, gc_grace_s=gc_grace_s)
        objects._check_writable()
        return cls(PgBackend.create(pg, dict(meta or {})), objects, identity(url))

    # objects: the S3 part
    def get_many(self, oids: Iterable[bytes]) -> dict[bytes, StoredObject]:
        return self.objects.get_many(oids)

    def has_many(self, oids: Iterable[bytes]) -> set[bytes]:
        return self.objects.has_many(oids)

    def put_many(self, objs: Iterable[StoredObject], now_ns: int) -> int:
        return self.objects.put_many(objs, now_ns)

    def iter_objects(self, prefix: bytes = b"") -> Iterator[ObjectMeta]:
        return self.objects.iter_objects(prefix)

    def delete_objects(self, oids: Iterable[bytes], touched_before_ns: int) -> int:
        return self.objects.delete_objects(oids, touched_before_ns)

    def object_stats(self) -> tuple[int, int, int]:
        return self.objects.object_stats()

    def lock(self, name: str = "gc", wait_s: float = 0.0) -> contextlib.AbstractContextManager[bool]:
        return self.objects.lock(name, wait_s)

    def lock_holder(self, name: str = "gc") -> str | None:
        return self.objects.lock_holder(name)

    def maintain(self, compact: bool = False) -> None:
        self.objects.maintain(compact)

    def disk_bytes(self) -> int:
        """Bytes at rest: the S3 objects under the prefix plus the PostgreSQL schema's tables."""
        return self.objects.disk_bytes() + self.meta.disk_bytes()

    # refs, index, meta: the PostgreSQL part
    def get_ref(self, name: str) -> bytes | None:
        return self.meta.get_ref(name)

    def refs(self, prefix: str = "") -> dict[str, bytes]:
        return self.meta.refs(prefix)

    def set_ref_if_equals(self, name: str, old: bytes | None, new: bytes | None) -> None:
        self.meta.set_ref_if_equals(name, old, new)

    def reflog(self, ref: str) -> list[ReflogEntry]:
        return self.meta.reflog(ref)

    def reflog_append(self, entry: ReflogEntry) -> None:
        self.meta.reflog_append(entry)

    def reflog_delete(self, ref: str) -> None:
        self.meta.reflog_delete(ref)

    def get_symref(self, name: str) -> str | None:
        return self.meta.get_symref(name)

    def set_symref(self, name: str, target: str) -> None:
        self.meta.set_symref(name, target)

    def index_get(self, cid: bytes) -> IndexRow | None:
        return self.meta.index_get(cid)

    def index_rows(self, branch: str | None = None) -> list[IndexRow]:
        return self.meta.index_rows(branch)

    def index_add(self, row: IndexRow) -> None:
        self.meta.index_add(row)

    def index_remove(self, ids: Iterable[bytes]) -> int:
        return self.meta.index_remove(ids)

    def index_rebranch(self, old: str, new: str) -> None:
        self.meta.index_rebranch(old, new)

    def alias_get(self, alias: str) -> bytes | None:
        return self.meta.alias_get(alias)

    def alias_set(self, alias: str, cid: bytes) -> None:
        self.meta.alias_set(alias, cid)

    def alias_forget(self, cids: Iterable[bytes]) -> int:
        return self.meta.alias_forget(cids)

    def counter_next(self, name: str) -> int:
        return self.meta.counter_next(name)

    def index_children(self, cids: Iterable[bytes]) -> list[IndexRow]:
        return self.meta.index_children(cids)

    def index_renumber(self, seqs: Mapping[bytes, int]) -> int:
        return self.meta.index_renumber(seqs)

    def index_last(self) -> bytes | None:
        return self.meta.index_last()

    def index_prefix(self, hex_prefix: str, limit: int = 20) -> list[bytes]:
        return self.meta.index_prefix(hex_prefix, limit)

    def meta_get(self, key: str) -> str | None:
        return self.meta.meta_get(key)

    def meta_set(self, key: str, value: str) -> None:
        self.meta.meta_set(key, value)

    def close(self) -> None:
        try:
            self.objects.close()
        finally:
            self.meta.close()


class SplitOpener(Opener):
    """``pg+s3://host/db?schema=NAME&objects=s3://bucket/prefix&endpoint=...&region=...``."""

    label = "PostgreSQL + S3"

    def identity(self, loc: Location) -> str:
        return identity(loc.target)

    def open(self, loc: Location) -> Opened:
        try:
            b = SplitBackend.open_url(loc.target)
        except StoreNotFound:
            raise StoreNotFound(f"{identity(loc.target)}: no crewckpt store there; create one with "
                                f"`ckpt init {identity(loc.target)}`") from None
        return Opened(b, b.where)

    def create(self, loc: Location, meta: Mapping[str, str], *, private: bool) -> Opened:
        b = SplitBackend.create(loc.target, meta)
        return Opened(b, b.where)


OPENER = SplitOpener()

__all__ = ["OPENER", "SplitBackend", "SplitOpener", "identity", "split_location"]
