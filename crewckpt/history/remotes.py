"""Remotes, as in git: named locations kept in the store's own config, remote-tracking refs
(``refs/remotes/<remote>/<branch>``, written ``origin/main`` in revisions) and the verbs that move commits
between two stores: clone, fetch, pull (fast-forward only) and push (fast-forward unless forced; the remote
branch moves by compare-and-swap against the tip read when the push was planned, so of two racing pushers
exactly one wins). The transfer itself is :mod:`crewckpt.history.sync`.

The config is one meta string ``remotes``: a JSON object ``{name: location}`` (locations are stored in their
canonical form, so a relative path keeps meaning the same store from any working directory).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from crewckpt.backends import memory, registry
from crewckpt.backends.base import Parts, writing
from crewckpt.errors import (
    CkptError,
    PullDiverged,
    PushRejected,
    StoreExists,
    StoreNotFound,
    SyncError,
    UnknownRemote,
    UntrustedRemote,
)
from crewckpt.format import objects as ob
from crewckpt.history import head, refnames, trust
from crewckpt.history.sync import (
    Progress,
    RefResult,
    RefUpdate,
    Side,
    TransferReport,
    is_ancestor,
    move_refs,
    transfer,
)

if TYPE_CHECKING:
    from crewckpt.history.store import Store

_log = logging.getLogger("crewckpt")
META_KEY = "remotes"
DEFAULT_REMOTE = "origin"
# Tracking namespace of a fetch/pull from a bare location (not a configured remote) while a configured remote
# holds the default namespace: git writes only FETCH_HEAD then; here refs/remotes/FETCH_HEAD/<branch> keeps
# what was fetched reachable (`ckpt log FETCH_HEAD/main`) without touching the configured remote's refs.
FETCH_HEAD = "FETCH_HEAD"


# -- configuration ---------------------------------------------------------------------------------------------

def check_remote_name(name: object) -> str:
    """Validate a remote name (a branch name without '/'); returns its NFC form. Raises BadRefName."""
    n = refnames.check_branch(name)
    if "/" in n:
        raise refnames.BadRefName(f"bad remote name {n!r}: contains '/'; use letters, digits, '-', '_' and '.'")
    return n


def remotes(store: Store) -> dict[str, str]:
    """``name -> location`` of the store's remotes, sorted by name."""
    raw = store.backend.meta_get(META_KEY)
    if not raw:
        return {}
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CkptError(f"the store's remote config is damaged ({raw[:40]!r}); re-add the remotes with "
                        f"`ckpt remote add`") from None
    return {str(k): str(v) for k, v in sorted(data.items())} if isinstance(data, dict) else {}


def canonical(location: str | os.PathLike[str]) -> str:
    """The canonical identity of a location (:func:`crewckpt.backends.registry.identity`: a plain path becomes
    absolute); a URL whose backend is not installed here is kept as written (scheme in lower case), so a
    remote can be recorded before its driver is installed. Raises BadLocation (an unknown scheme)."""
    return registry.identity(location, strict=False)


def add_remote(store: Store, name: str, location: str | os.PathLike[str], *, check: bool = True) -> str:
    """Add remote ``name`` at ``location`` (stored canonical; returns that form).

    ``check`` (default): a local location (a folder path, ``sqlite:PATH``, ``memory:NAME``) must hold a store
    now, so a typo is caught here rather than at the first fetch; ``check=False`` records it anyway (a store
    created later). URLs are never contacted here (a server may be down; git accepts unreachable URLs too).

    Raises:
        BadRefName: bad name. StoreNotFound: (``check``) a local location that holds no store. CkptError: the
        name exists already, or the location is this store itself (any spelling: ``./x``, ``x/``, a symlink).
    """
    name = check_remote_name(name)
    if name == FETCH_HEAD:
        raise refnames.BadRefName(f"bad remote name {name!r}: reserved for fetches from a bare location; "
                                  f"choose another name")
    loc = canonical(location)
    if is_this_store(store, location):
        raise CkptError(f"{location}: that is this store itself; a remote is another store (give its location)")
    if check and local_location(location):
        why = why_not_a_store(location)
        if why is not None:
            raise StoreNotFound(f"cannot add remote {name}: {location}: {why}; check the location, or add it "
                                f"anyway with `ckpt remote add --no-check {name} {location}`")
    with writing(store.backend) as w:
        cur = _read(w.meta_get(META_KEY))
        if name in cur:
            raise CkptError(f"remote {name!r} already exists ({cur[name]}); remove it first with "
                            f"`ckpt remote remove {name}`")
        cur[name] = loc
        w.meta_set(META_KEY, orjson.dumps(dict(sorted(cur.items()))).decode())
    trust.record(location_of(store), name, loc)  # this user chose it: usable by name on this machine
    return loc


def local_location(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` is on this machine and cheap to look at (a folder path, ``sqlite:``, ``memory:``).
    Raises BadLocation (an unknown scheme)."""
    return registry.parse(location).scheme in ("sqlite", "memory")


def why_not_a_store(location: str | os.PathLike[str]) -> str | None:
    """For a local location: why no store is there, in a few words without a fix ("no such folder", "a file,
    not a store folder", ...); None when one is (or for a remote URL, which only connecting can tell)."""
    loc = registry.parse(location)
    if loc.scheme == "memory":
        return None if registry.has_store(loc) else "no in-memory store of that name in this process"
    if loc.scheme != "sqlite":
        return None
    try:
        registry.open_backend(loc.text).backend.close()  # the real test: what fetch will open
        return None
    except StoreNotFound:
        pass
    except CkptError as e:  # a damaged or newer store, a permission problem: its own words
        return str(e)
    p = loc.target
    if not os.path.lexists(p):
        return "no such folder"
    if not os.path.isdir(p):
        return "a file, not a store folder"
    return "a folder without a crewckpt store"


def is_this_store(store: Store, location: str | os.PathLike[str] | Store) -> bool:
    """Whether ``location`` (or an open Store) names ``store`` itself, however spelled: the same identity,
    the same backend object, or (local stores) the same ``store.db`` file, so ``./x``, ``x/``, a symlink to
    it and a project folder holding it as ``.ckpt`` all count. Never raises for a location no backend serves."""
    if not isinstance(location, (str, os.PathLike)):
        if location.backend is store.backend:
            return True
        a, b = getattr(store, "path", None), getattr(location, "path", None)
        if a is not None and b is not None:  # local store folders: the same folder, however reached
            try:
                return os.path.samefile(a, b)
            except OSError:
                pass
        return location.location is not None and location.location == location_of(store)
    try:
        here = location_of(store)
        if here is None:
            return False
        if canonical(location) == here:
            return True
        mine = registry.instance(here)
        return mine is not None and registry.instance(location) == mine
    except CkptError:
        return False


def trust_remote(store: Store, name: str) -> str:
    """Trust remote ``name`` that came with the store (its location as configured); returns the location.

    Raises:
        UnknownRemote: no such remote.
    """
    conf = remotes(store)
    if name not in conf:
        raise UnknownRemote(f"no remote named {name!r}; see `ckpt remote -v`")
    trust.record(location_of(store), name, conf[name])
    return conf[name]


def remove_remote(store: Store, name: str) -> list[str]:
    """Remove remote ``name`` and its remote-tracking refs (as git does); returns the refs removed.

    Raises:
        UnknownRemote.
    """
    with writing(store.backend) as w:
        cur = _read(w.meta_get(META_KEY))
        if name not in cur:
            raise UnknownRemote(f"no remote named {name!r}; see `ckpt remote -v`")
        del cur[name]
        w.meta_set(META_KEY, orjson.dumps(cur).decode())
        gone = w.refs(tracking_prefix(name))
        _delete_tracking(w, gone)
    trust.record(location_of(store), name, None)
    return list(gone)


def _delete_tracking(w: Parts, gone: dict[str, bytes]) -> None:
    """Delete remote-tracking refs (``ref -> tip``) and their reflogs, and un-index the commits fetched for
    them that no other ref reaches any more (as in git, they become unreachable: not listed, gc collects
    them). Commits a local branch or another ref still reaches stay live."""
    for ref, target in gone.items():
        w.set_ref_if_equals(ref, target, None)
        w.reflog_delete(ref)
    labels = {ref[len(refnames.REMOTES):] for ref in gone}  # fetched commits carry the label "origin/exp"
    rows = {r.id: r for r in w.index_rows()}
    if not labels or not any(r.branch in labels for r in rows.values()):
        return
    reach: set[bytes] = set()
    stack = list(w.refs().values())
    while stack:
        cid = stack.pop()
        if cid in reach:
            continue
        reach.add(cid)
        row = rows.get(cid)
        if row is not None:
            stack.extend(row.parents)
    w.index_remove([cid for cid, r in rows.items() if r.branch in labels and cid not in reach])


def prune_remote(store: Store, remote: str | Store | None = None, *, name: str | None = None,
                 dry_run: bool = False) -> SyncReport:
    """Delete the remote-tracking refs ``refs/remotes/<name>/*`` whose branch the remote no longer has
    (``ckpt remote prune``, ``fetch --prune``); nothing is transferred. Each is reported with status
    "pruned" (with ``dry_run``: would be, nothing changed).

    Raises:
        UnknownRemote, UntrustedRemote, CkptError: as :func:`fetch`.
    """
    with connect(store, remote) as (label, other):
        ns = namespace(store, label, name, other, prune=True)
        rep = SyncReport(dry_run=dry_run, remote=_where(other, label), verb="prune")
        rep.refs = _prune_stale(store, ns, other.backend.refs(refnames.HEADS), dry_run)
    return rep


def _prune_stale(store: Store, ns: str, heads: dict[str, bytes], dry_run: bool) -> list[RefResult]:
    """Delete ``refs/remotes/<ns>/B`` for each B that is not among the remote's ``heads`` (every branch ref
    it holds, valid here or not: a branch that exists but was not fetched is not stale)."""
    have = {ref[len(refnames.HEADS):] for ref in heads}
    prefix = tracking_prefix(ns)
    stale = {ref: tip for ref, tip in store.backend.refs(prefix).items() if ref[len(prefix):] not in have}
    if stale and not dry_run:
        with writing(store.backend) as w:
            _delete_tracking(w, stale)
    return [RefResult(ref, tip.hex(), None, "pruned") for ref, tip in sorted(stale.items())]


def _read(raw: str | None) -> dict[str, str]:
    try:
        data = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        data = {}
    return dict(data) if isinstance(data, dict) else {}


def tracking_prefix(remote: str) -> str:
    """``origin`` -> ``refs/remotes/origin/``."""
    return f"{refnames.REMOTES}{remote}/"


def tracking_refs(store: Store, remote: str | None = None) -> dict[str, str]:
    """``origin/main -> tip id`` for every remote-tracking ref (of one remote, or all)."""
    prefix = tracking_prefix(remote) if remote else refnames.REMOTES
    return {k[len(refnames.REMOTES):]: v.hex() for k, v in store.backend.refs(prefix).items()}


# -- connecting ------------------------------------------------------------------------------------------------

@contextmanager
def connect(store: Store, remote: str | Store | None) -> Iterator[tuple[str | None, Store]]:
    """``(remote name or None, the other store opened)`` for a configured name (default ``origin``), a
    location or an open Store (not closed here).

    Raises:
        UnknownRemote: no remote given and no ``origin``; or a name that is neither a remote nor a store.
        StoreNotFound: a configured remote's location holds no store (the message says how to fix it).
        CkptError: the remote is this store itself.
    """
    if not isinstance(remote, (str, os.PathLike)) and remote is not None:  # an open Store
        _refuse_self(store, remote, None, "that store")
        yield _name_of(remotes(store), remote), remote
        return
    Store = type(store)  # noqa: N806 (the class that opens locations; history.store imports this module)
    conf = remotes(store)
    name = remote if remote is not None else DEFAULT_REMOTE
    if name in conf:
        if not trust.trusted(location_of(store), name, conf[name]):
            raise UntrustedRemote(
                f"remote {name} ({conf[name]}) came with this store and was not added on this machine; it would "
                f"receive your credentials and checkpoints: check it with `ckpt remote -v`, then `ckpt remote "
                f"trust {name}` (or remove it)")
        other = _open_remote(Store, name, conf[name])
        label: str | None = name
    elif remote is None:
        raise UnknownRemote("no remote named 'origin'; add one with `ckpt remote add origin LOCATION` or name a "
                            "remote")
    elif (known := _configured_name(conf, remote)) is not None:  # a remote's own location: use its name
        other = _open_remote(Store, known, conf[known])
        label = known
    else:
        if is_this_store(store, remote):  # before opening: "x/../.ckpt" names it though "x" does not exist
            raise CkptError(f"{remote} ({location_of(store)}) is this store itself; fetch, pull and push need "
                            f"another store's location or remote name")
        try:
            other = Store.open(remote)
        except CkptError as e:
            known = ", ".join(conf) or "none configured"
            why = why_not_a_store(remote) if isinstance(e, StoreNotFound) and local_location(remote) else None
            raise UnknownRemote(f"{remote!r} is neither a remote ({known}) nor a store: "
                                f"{f'{remote}: {why}; check the name or location' if why else e}") from None
        label = _name_of(conf, other)
    try:
        _refuse_self(store, other, label, str(remote))
        yield label, other
    finally:
        other.close()


def _configured_name(conf: dict[str, str], location: str | os.PathLike[str]) -> str | None:
    """The configured remote whose recorded (canonical) location ``location`` spells, else None."""
    try:
        loc = canonical(location)
    except CkptError:
        return None
    return next((n for n, v in conf.items() if v == loc), None)


def _name_of(conf: dict[str, str], other: Store) -> str | None:
    """The configured remote at ``other``'s location (another spelling of it), else None."""
    loc = location_of(other)
    return next((n for n, v in conf.items() if loc is not None and v == loc), None)


def namespace(store: Store, label: str | None, name: str | None, other: Store, *, prune: bool = False) -> str:
    """The tracking namespace of a fetch/pull: ``name`` if given, else the remote's name ``label``, else (a bare
    location) ``origin`` unless a configured remote already holds that name, then :data:`FETCH_HEAD`: a bare
    location never writes another remote's tracking refs.

    Raises:
        CkptError: ``prune`` with a bare location (pruning would delete refs that location never wrote).
    """
    if name or label:
        return check_remote_name(name or label)
    if prune:
        where = location_of(other) or "that store"
        raise CkptError(f"--prune needs a configured remote: {where} is not one; add it with `ckpt remote add "
                        f"NAME {where}`, then `ckpt fetch --prune NAME`")
    return FETCH_HEAD if DEFAULT_REMOTE in remotes(store) else DEFAULT_REMOTE


def _open_remote(store_cls: type[Store], name: str, location: str) -> Store:
    """Open configured remote ``name``; a local location without a store is named with the way to fix the
    config (not `ckpt init` at what may be a typo)."""
    try:
        return store_cls.open(location)
    except StoreNotFound as e:
        why = why_not_a_store(location) if local_location(location) else None
        raise StoreNotFound(f"remote {name} ({location}): {why or e}; check the location with `ckpt remote -v`, "
                            f"fix it with `ckpt remote remove {name}` then `ckpt remote add {name} LOCATION`") from None


def _refuse_self(store: Store, other: Store, label: str | None, given: str) -> None:
    if is_this_store(store, other):
        fix = f"; remove it with `ckpt remote remove {label}`" if label else ""
        raise CkptError(f"{f'remote {label}' if label else given} ({location_of(other) or 'memory store'}) is this "
                        f"store itself; fetch, pull and push need another store{fix}")


def side(store: Store, name: str) -> Side:
    """The sync view of a store (its maintenance parts: verified objects over the backend's parts)."""
    p = store.parts
    return Side(p.backend, p.objects, name)


def location_of(store: Store) -> str | None:
    """The store's canonical location, None for an anonymous memory store."""
    return store.location


def _where(store: Store, label: str | None) -> str:
    return label or location_of(store) or "memory store"


def current_branch(store: Store) -> str:
    """The branch HEAD names (symbolic HEAD), else that of the last commit written, else ``main``."""
    cur = getattr(store, "current_branch", None)
    if callable(cur):
        b = cur()
        if isinstance(b, str) and b:
            return b
    last = store.backend.index_last()
    row = store.backend.index_get(last) if last else None
    if row is not None and store.backend.get_ref(refnames.HEADS + row.branch) is not None:
        return row.branch
    return "main"


# -- verbs -----------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class SyncReport(TransferReport):
    """A :class:`TransferReport` plus the ``remote`` (name or location) it talked to and the ``verb``."""

    remote: str = ""
    verb: str = ""

    def to_json(self) -> dict[str, object]:
        """Stable JSON form (docs/cli-json.md)."""
        return {"verb": self.verb, "remote": self.remote, **super().to_json()}


def _valid_heads(heads: dict[str, bytes]) -> tuple[dict[str, bytes], list[RefResult]]:
    """Split a remote's branch refs into those whose names are valid branch names here and the others,
    reported as rejected (a hostile store may hold ``../../x`` or control characters: never made local)."""
    good: dict[str, bytes] = {}
    bad: list[RefResult] = []
    for ref, tip in heads.items():
        try:
            refnames.check_branch(ref[len(refnames.HEADS):])
        except CkptError as e:
            bad.append(RefResult(ref.encode("unicode_escape").decode("ascii"), None, tip.hex(), "rejected",
                                 f"not a valid branch name here ({e}); not fetched"))
            continue
        good[ref] = tip
    return good, bad


def tip_problem(backend: Parts, tip: bytes, where: str) -> str | None:
    """Why branch tip ``tip`` of the store ``where`` cannot be fetched (it is not there, or not a commit), in
    one line with what to do; None when it is a commit object (its bytes are verified when read)."""
    got = backend.get_many([tip]).get(tip)
    if got is None:
        return f"points at {tip.hex()[:12]}, which {where} does not have (a damaged store: run `ckpt fsck` there)"
    if got.kind != ob.COMMIT:
        kind = ob.KIND_NAMES.get(got.kind, b"unknown object").decode()
        return (f"points at {tip.hex()[:12]}, a {kind}, not a checkpoint (a damaged or hostile store: run "
                f"`ckpt fsck` there)")
    return None


def _sound_heads(backend: Parts, heads: dict[str, bytes], where: str) -> tuple[dict[str, bytes], list[RefResult]]:
    """Split branch refs into those whose tip is a commit object and the others, reported as rejected."""
    good: dict[str, bytes] = {}
    bad: list[RefResult] = []
    kinds = backend.get_many(list(set(heads.values()))) if heads else {}
    for ref, tip in heads.items():
        got = kinds.get(tip)
        why = tip_problem(backend, tip, where) if got is None or got.kind != ob.COMMIT else None
        if why is not None:
            bad.append(RefResult(ref, None, tip.hex(), "rejected", f"{why}; not fetched"))
            continue
        good[ref] = tip
    return good, bad


def _remote_heads(other: Store, where: str) -> tuple[dict[str, bytes], list[RefResult]]:
    """The remote's branch refs that can be fetched, and the others as rejected results (a name not valid
    here, a tip that is missing or not a commit)."""
    heads, invalid = _valid_heads(other.backend.refs(refnames.HEADS))
    heads, broken = _sound_heads(other.backend, heads, where)
    return heads, invalid + broken


def _report(verb: str, remote: str, t: TransferReport, extra: Sequence[RefResult] = ()) -> SyncReport:
    return SyncReport(t.commits, t.objects, t.bytes, t.seconds, [*t.refs, *extra], t.dry_run, remote, verb)


def fetch(store: Store, remote: str | Store | None = None, branches: Sequence[str] | None = None, *,
          name: str | None = None, dry_run: bool = False, progress: Progress | None = None,
          prune: bool = False) -> SyncReport:
    """Bring the remote's branches (all, or ``branches``) and what they need; move ``refs/remotes/<name>/*``
    to the remote's tips (forced, as git's default refspec ``+refs/heads/*:refs/remotes/origin/*``).

    ``name``: the tracking namespace when ``remote`` is a location or a Store (default: the remote's name).
    ``prune``: also delete the tracking refs of branches the remote no longer has (git's ``fetch --prune``;
    reported as "pruned"). With ``branches`` there is nothing to prune (a named branch the remote lacks is an
    error), as git prunes only what its refspec names.

    Raises:
        UnknownRemote; CkptError: a branch the remote does not have; SyncError / IntegrityError: the remote
            is damaged (nothing written).
    """
    with connect(store, remote) as (label, other):
        ns = namespace(store, label, name, other, prune=prune and not branches)
        heads, invalid = _remote_heads(other, _where(other, label))
        if branches:
            want = {}
            for b in branches:
                ref = refnames.branch_ref(b)
                bad = next((r for r in invalid if r.ref == ref), None)
                if bad is not None:
                    why = (bad.reason or "").removesuffix("; not fetched")
                    raise SyncError(f"branch {b} of {_where(other, label)} {why}; nothing was fetched")
                if ref not in heads:
                    raise CkptError(f"{_where(other, label)} has no branch {b!r}; its branches: "
                                    f"{', '.join(k[len(refnames.HEADS):] for k in heads) or 'none'}")
                want[ref] = heads[ref]
            heads = want
        there, here = side(other, _where(other, label)), side(store, "this store")
        updates = []
        for ref, tip in heads.items():
            b = ref[len(refnames.HEADS):]
            dst = tracking_prefix(ns) + b
            old = store.backend.get_ref(dst)
            status = ("new" if old is None else "up-to-date" if old == tip
                      else "fast-forward" if is_ancestor(there, old, tip) else "forced")
            updates.append(RefUpdate(dst, tip, old, f"{ns}/{b}", status, f"fetch: {status} from {there.name}",
                                     source_branch=b))
        rep = _report("fetch", there.name, transfer(there, here, updates, dry_run=dry_run, progress=progress),
                      [] if branches else invalid)
        if prune and not branches:  # after the transfer: a kill in between leaves stale refs, never a lost one
            rep.refs += _prune_stale(store, ns, other.backend.refs(refnames.HEADS), dry_run)
        return rep


def pull(store: Store, remote: str | Store | None = None, branch: str | None = None, *, name: str | None = None,
         dry_run: bool = False, progress: Progress | None = None) -> SyncReport:
    """Fetch ``branch`` (default: the current one) and fast-forward the local branch to it (created when it
    does not exist). Never merges.

    Raises:
        PullDiverged: both sides have commits the other lacks (the message names both tips and the ways out);
            the fetch itself stays (the remote-tracking ref moved). And fetch's errors.
    """
    b = refnames.check_branch(branch or current_branch(store))
    ref = refnames.HEADS + b
    here = side(store, "this store")
    with connect(store, remote) as (label, other):
        ns = namespace(store, label, name, other)
        rep = fetch(store, other, [b], name=ns, dry_run=dry_run, progress=progress)
        rep.verb, rep.remote = "pull", _where(other, label)
        there = side(other, rep.remote)
        theirs = other.backend.get_ref(ref)
        assert theirs is not None  # fetch checked the branch exists
        mine = store.backend.get_ref(ref)
        # after a real fetch both tips are here; a dry run may need the remote's graph too
        graphs = [here] if not dry_run else [here, there]
        ahead = mine is not None and _related(graphs, theirs, mine)
        behind = mine is None or _related(graphs, mine, theirs)
    if mine == theirs or ahead:
        rep.refs.append(RefResult(ref, _hex(mine), _hex(mine), "up-to-date"))
        return rep
    if not behind:
        assert mine is not None
        raise PullDiverged(f"{b} ({mine.hex()[:12]}) and {ns}/{b} ({theirs.hex()[:12]}) have diverged: each has "
                           f"checkpoints the other lacks, and pull only fast-forwards; keep both with `ckpt branch "
                           f"{b}-{ns} {ns}/{b}`, or replace the remote's with `ckpt push --force {rep.remote} {b}`")
    status = "new" if mine is None else "fast-forward"
    if dry_run:
        rep.refs.append(RefResult(ref, _hex(mine), theirs.hex(), status))
        return rep
    if store.backend.get_ref(refnames.HEADS + f"{ns}/{b}") is not None:  # its commits share the label
        raise CkptError(f"a local branch is named {ns}/{b}, like the remote-tracking branch: pull would take "
                        f"its checkpoints over; rename it first (`ckpt branch -m {ns}/{b} NEW`)")
    res = move_refs(here, [RefUpdate(ref, theirs, mine, b, status, f"pull: {status} from {rep.remote}")])
    if res[0].status != "rejected":
        store.backend.index_rebranch(f"{ns}/{b}", b)  # arrived as origin/main's; now the local branch's own
    rep.refs.extend(res)
    return rep


def _related(graphs: Sequence[Side], ancestor: bytes, descendant: bytes) -> bool:
    """Whether ``ancestor`` is an ancestor of ``descendant`` in one of ``graphs`` that knows both."""
    return any(_known(g.backend, ancestor) and _known(g.backend, descendant) and is_ancestor(g, ancestor, descendant)
               for g in graphs)


def _known(parts: Parts, cid: bytes) -> bool:
    return parts.index_get(cid) is not None or bool(parts.has_many([cid]))


def push(store: Store, remote: str | Store | None = None, branch: str | None = None, *, all_branches: bool = False,
         force: bool = False, name: str | None = None, dry_run: bool = False,
         progress: Progress | None = None) -> SyncReport:
    """Send ``branch`` (default, or ``"HEAD"`` / ``"@"`` as in ``git push origin HEAD``: the current one;
    ``all_branches``: every local branch) to the remote and move the remote's branch of the same name, by
    compare-and-swap against its tip as read now.

    A branch whose remote tip is not an ancestor of the local one is rejected (not a fast-forward) unless
    ``force``; the others still go. When the remote is a configured one (or ``name`` names the tracking
    namespace of a location or Store), its remote-tracking refs follow.
    The report lists each ref ("rejected" ones with the reason); see :func:`push_or_raise`.

    Raises:
        UnknownRemote, UnknownRevision (no such local branch), SyncError / IntegrityError (a damaged local
        store: nothing was written to the remote).
    """
    from crewckpt.errors import UnknownRevision

    if all_branches:
        names = list(store.branches())
    else:
        names = [refnames.check_branch(current_branch(store) if branch in (None, head.HEAD, "@") else branch)]
    with connect(store, remote) as (label, other):
        here, there = side(store, "this store"), side(other, _where(other, label))
        updates, rejected = [], []
        for b in names:
            ref = refnames.HEADS + b
            mine = store.backend.get_ref(ref)
            if mine is None:
                raise UnknownRevision(f"no branch named {b!r} here; see `ckpt branch`")
            theirs = other.backend.get_ref(ref)
            if theirs is None:
                status = "new"
            elif theirs == mine:
                status = "up-to-date"
            elif (broken := tip_problem(other.backend, theirs, there.name)) is not None and not force:
                rejected.append(RefResult(ref, theirs.hex(), mine.hex(), "rejected",
                                          f"{there.name}'s {b} {broken}; `ckpt push --force {label or there.name} "
                                          f"{b}` replaces it"))
                continue
            elif broken is None and _known(store.backend, theirs) and is_ancestor(here, theirs, mine):
                status = "fast-forward"
            elif force:
                status = "forced"
            else:
                rejected.append(RefResult(ref, theirs.hex(), mine.hex(), "rejected",
                                          _not_ff(here, b, theirs, mine, label or there.name, there)))
                continue
            updates.append(RefUpdate(ref, mine, theirs, b, status, f"push: {status} from {location_of(store) or 'memory'}",
                                     source_branch=b))
        rep = _report("push", there.name, transfer(here, there, updates, dry_run=dry_run, progress=progress), rejected)
    label = check_remote_name(name) if name else label
    if label and not dry_run:  # the tracking refs record what the remote now holds
        moved = [r for r in rep.refs if r.status not in ("rejected",) and r.new]
        tracking = []
        for r in moved:
            dst = tracking_prefix(label) + r.ref[len(refnames.HEADS):]
            new = bytes.fromhex(r.new)  # type: ignore[arg-type]
            tracking.append(RefUpdate(dst, new, store.backend.get_ref(dst), "", "push", f"push to {label}"))
        move_refs(here, tracking)
    return rep


def _not_ff(here: Side, b: str, theirs: bytes, mine: bytes, remote: str, there: Side) -> str:
    """Why a push of ``b`` is not a fast-forward, and the way out that works, git's first: ``pull`` then push
    again (pull fast-forwards only), a new name for a divergence or two lineages, or ``--force``. Only when
    ``mine`` is the lineage of a named run (a CrewAI run, an import, an explicit ``run_id=``: see
    :func:`refnames.anonymous_run`) does ``ckpt publish`` come first: that is the README's fix for a fresh
    kickoff, and pull cannot fix it. A plain ``Store.commit``'s anonymous ``w-...`` run gets no such hint."""

    tips = f"({there.name} {b} is {theirs.hex()[:12]}, yours {mine.hex()[:12]})"
    force = "or push with --force to replace it (its checkpoints stay there, unnamed by that branch)"
    run = run_holding(here, mine)
    if run and refnames.anonymous_run(run[len(refnames.RUNS):]):
        run = None
    publish = ""
    if run:  # what publish (every run, oldest first) does with the branch: a tip its run ref keeps is replaced
        old = run_holding(there, theirs) or (run_holding(here, theirs) if _known(here.backend, theirs) else None)
        moves = (f"and moves {b} to it, {old} keeping the old tip" if old else
                 f"{b} there stays: no run ref names its tip")
        publish = f"`ckpt publish {remote}` publishes {run} under its own name ({moves}); or "
    if not _known(here.backend, theirs):
        return (f"the remote has checkpoints you do not have {tips}; {publish}`ckpt pull {remote} {b}` then push "
                f"again (pull only fast-forwards: if both stores moved {b}, `ckpt branch NEW {b}` then `ckpt push "
                f"{remote} NEW`), {force}")
    if is_ancestor(here, mine, theirs):
        return f"not a fast-forward: the remote is ahead of yours {tips}; `ckpt pull {remote} {b}` first, {force}"
    return (f"not a fast-forward: the remote's tip is not an ancestor of yours and pull cannot fast-forward "
            f"either (diverged, or two lineages: a fresh run moved {b} to a new root) {tips}; {publish}push "
            f"yours as a new branch: `ckpt branch NEW {b}` then `ckpt push {remote} NEW`, {force}")


def push_or_raise(rep: SyncReport) -> SyncReport:
    """``rep``, or PushRejected naming the first rejected ref when any was rejected."""
    bad = rep.rejected
    if bad:
        b = bad[0].ref[len(refnames.HEADS):] if bad[0].ref.startswith(refnames.HEADS) else bad[0].ref
        raise PushRejected(f"push of {b} to {rep.remote} rejected: {bad[0].reason}")
    return rep


CLONE_STATE = "clone_state"
"""Meta key of a store made by clone: "pending" until the clone finished, then "done"."""


def clone(store_cls: type[Store], src: str | Store, dest: str | os.PathLike[str], *, origin: str = DEFAULT_REMOTE,
          progress: Progress | None = None) -> tuple[Store, SyncReport]:
    """Create a store at ``dest`` holding every branch of ``src`` (as local branches and as
    ``<origin>/<branch>`` remote-tracking refs), with remote ``origin`` naming ``src``. Running it again on
    a clone that was interrupted finishes it; on a finished clone it is refused (fetch or pull update it).

    As git does: ``dest`` is checked first (a store that is not an interrupted clone of ``src``, a file or a
    folder that is not empty is refused before ``src`` is contacted); ``src`` is opened before anything is
    created (a bad or unreachable source leaves nothing behind); a clone that fails after creating ``dest``
    removes what it created (a local folder or ``memory:`` store; never what was there before). A clone into
    a URL that fails midway is left as an interrupted clone, and the error says so.

    ``store_cls``: the Store class (``Store.clone`` passes itself).

    Raises:
        StoreExists: ``dest`` holds another store (not a clone of ``src``), a finished clone, or an
            interrupted clone whose branch moved since. CkptError: ``dest`` is a file or a folder that is not
            empty; ``src`` holds no store (one line naming why). And fetch's errors.
    """
    Store = store_cls  # noqa: N806
    origin = check_remote_name(origin)
    src_loc = canonical(src) if isinstance(src, (str, os.PathLike)) else None
    d = _unfinished_clone(Store, src, src_loc, dest, origin)  # refuses an occupied dest up front
    if src_loc is not None:
        other = _open_source(Store, str(src), src_loc)
    else:
        other = src  # type: ignore[assignment]
    undo = None
    try:
        fresh = d is None
        if d is None:
            d, undo = _create(Store, dest)
        try:
            if fresh:
                with writing(d.backend) as w:
                    w.meta_set(CLONE_STATE, "pending")  # a rerun may finish this clone, never redo a finished one
                if src_loc is not None:
                    add_remote(d, origin, src_loc, check=False)
            rep = _clone_into(d, other, origin if src_loc is not None else _where(other, None), origin, dest,
                              progress)
        except BaseException as e:
            d.close()
            if undo is not None:
                undo()
            elif isinstance(e, CkptError) and not registry.local_folder(dest):
                raise SyncError(f"{e}; {dest} is left as an interrupted clone: run the same clone again to finish "
                                f"it") from e
            raise
    finally:
        if src_loc is not None:
            other.close()
    return d, rep


def _unfinished_clone(store_cls: type[Store], src: str | Store, src_loc: str | None, dest: str | os.PathLike[str],
                      origin: str) -> Store | None:
    """The store at ``dest`` when it is an interrupted clone of ``src`` (to finish), None when there is none.

    Raises:
        StoreExists: another store, or a finished clone. CkptError: ``dest`` is a file or a non-empty folder.
    """
    folder = registry.local_folder(dest)
    if folder is not None and why_not_a_store(folder) is not None:
        if os.path.lexists(folder) and not os.path.isdir(folder):
            raise CkptError(f"{dest}: exists and is a file; clone into a new or empty folder")
        if os.path.isdir(folder) and os.listdir(folder):
            raise CkptError(f"{dest}: exists and is not empty (and holds no store); clone into a new or empty "
                            f"folder")
        return None
    try:
        d = store_cls.open(dest)
    except StoreNotFound:
        return None
    if src_loc is not None and remotes(d).get(origin) != src_loc:
        d.close()
        raise StoreExists(f"{dest}: a store already exists there and is not a clone of {src}; pick another "
                          f"destination")
    if d.backend.meta_get(CLONE_STATE) != "pending":  # finished: its branches may hold local work now
        d.close()
        raise StoreExists(f"{dest}: already a clone of {src}; update it with `ckpt --store {dest} fetch` or "
                          f"`pull` (a second clone would reset its branches)")
    return d


def _open_source(store_cls: type[Store], src: str, src_loc: str) -> Store:
    """Open the clone's source first: a bad one is refused before anything is created."""
    try:
        return store_cls.open(src_loc)
    except StoreNotFound as e:
        why = why_not_a_store(src_loc) if local_location(src_loc) else None
        raise StoreNotFound(f"cannot clone {src}: {why}; check the location (nothing was created)" if why
                            else f"cannot clone {src}: {e}") from None


def _create(store_cls: type[Store], dest: str | os.PathLike[str]) -> tuple[Store, Callable[[], None] | None]:
    """A new store at ``dest`` and a function that removes what creating it made (None: a URL, left)."""
    folder = registry.local_folder(dest)
    if folder is None:
        d = store_cls.init(dest)
        loc = registry.parse(dest)
        if loc.scheme == "memory" and loc.target:
            return d, lambda: memory.forget(loc.target, d.backend)  # type: ignore[arg-type]
        return d, None
    p = Path(folder)
    made = [a for a in (p, *p.parents) if not os.path.lexists(a)]  # folders mkdir will create, deepest first
    before = set(os.listdir(p)) if not made else None
    d = store_cls.init(dest)

    def undo() -> None:
        if before is None:  # clone made the folder: everything in it is its own
            shutil.rmtree(p, ignore_errors=True)
        else:
            for name in set(os.listdir(p)) - before:
                with contextlib.suppress(OSError):
                    os.unlink(p / name)
        for a in made[1:]:  # the parents it made, if empty (never one that holds anything)
            try:
                os.rmdir(a)
            except OSError:
                break

    return d, undo


def _clone_into(d: Store, other: Store, label: str, origin: str, dest: str | os.PathLike[str],
                progress: Progress | None) -> SyncReport:
    there, here = side(other, label), side(d, "the clone")
    updates = []
    heads, invalid = _remote_heads(other, there.name)
    for ref, tip in heads.items():
        old = d.backend.get_ref(ref)
        b = ref[len(refnames.HEADS):]
        status = "new" if old is None else "up-to-date" if old == tip else "forced"
        tracked = d.backend.get_ref(tracking_prefix(origin) + b)
        if status == "forced" and old != tracked:  # not what the interrupted clone set: local work
            raise StoreExists(f"{dest}: branch {b} has commits the interrupted clone did not write; "
                              f"finish with `ckpt --store {dest} fetch` instead")
        updates.append(RefUpdate(ref, tip, old, b, status, f"clone: from {there.name}", source_branch=b))
    rep = _report("clone", there.name, transfer(there, here, updates, progress=progress), invalid)
    for u in updates:  # received as they are (the source's data), but `origin/x` would name two refs here
        if u.ref.startswith(f"{refnames.HEADS}{origin}/"):
            b = u.ref[len(refnames.HEADS):]
            _log.warning("crewckpt: %s has a branch named %s, like the remote-tracking ref of its %s: `%s` "
                         "names the local branch here; rename it with `ckpt branch -m %s NEW`", there.name, b,
                         b[len(origin) + 1:], b, b)
    track = [tracking_prefix(origin) + u.ref[len(refnames.HEADS):] for u in updates]
    rep.refs += move_refs(here, [RefUpdate(t, u.new, d.backend.get_ref(t), "", "new", f"clone: from {there.name}")
                                 for t, u in zip(track, updates, strict=True)])
    src_head = head.head_ref(other.backend)  # the clone starts on the source's current branch
    with writing(d.backend) as w:
        if d.backend.get_ref(src_head) is not None:
            w.set_symref(head.HEAD, src_head)
        w.meta_set(CLONE_STATE, "done")
    return rep


def _hex(oid: bytes | None) -> str | None:
    return oid.hex() if oid is not None else None


def run_holding(side: Side, cid: bytes) -> str | None:
    """The run ref (``refs/runs/<run id>``) on ``side`` that names ``cid`` or continues it (the run that wrote
    it), or None. Used by publish and by the advice of a rejected push."""
    row = side.backend.index_get(cid)
    try:
        run_id = row.run_id if row is not None else side.objects.commit(cid).run_id
        ref = refnames.run_ref(run_id)
    except CkptError:  # no such commit there, or a run id that is no ref name
        return None
    at = side.backend.get_ref(ref)
    if at is not None and (at == cid or is_ancestor(side, cid, at)):
        return ref
    return None
