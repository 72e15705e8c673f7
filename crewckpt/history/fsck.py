"""fsck: check that every live commit's objects exist and verify (quick), or re-hash every object (full).

Reports exactly the broken objects (missing or corrupt) and the live commits that need each of them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from crewckpt.errors import CkptError, CorruptStore, DocumentTooLarge, IntegrityError, MissingObject
from crewckpt.format import objects as ob
from crewckpt.history import head
from crewckpt.history.commits import REBUILD, repeated_parents, row_damage, row_differences, row_matches
from crewckpt.history.limits import ObjectBound, ReadBudget
from crewckpt.history.refnames import HEADS, ref_fix, ref_name_problem
from crewckpt.history.snapshot import links_in

if TYPE_CHECKING:
    from crewckpt.backends.base import IndexRow
    from crewckpt.history.gc import Progress
    from crewckpt.history.objectdb import ObjectDB
    from crewckpt.history.parts import StoreParts


@dataclasses.dataclass(frozen=True)
class FsckReport:
    """``broken``: object id -> reason ("missing" or the integrity error); ``affected``: live commit id ->
    sorted broken object ids it needs; ``checked``: the objects live commits reach (commits, trees, blobs),
    the same count quick and full (quick re-hashes commits and trees and checks blobs exist; full re-hashes
    all of them); ``problems``: other findings (index rows that disagree with their commit object, refs to
    missing commits); ``other_checked``: objects outside that graph (packs, dictionaries, what pruned
    commits left for gc) that ``full`` also re-hashed, 0 for quick; ``stale_rows``: live commit id -> what
    is wrong with its commit-index row (damaged, or disagreeing with the commit object; each is also one of
    ``problems``; the fix is ``ckpt fsck --rebuild-index``). All ids are 64-hex."""

    broken: dict[str, str]
    affected: dict[str, list[str]]
    checked: int
    problems: list[str]
    other_checked: int = 0
    stale_rows: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def affected_commits(self) -> list[str]:
        """Every live commit a finding names: those needing a broken object and those whose index row is
        stale (sorted 64-hex ids)."""
        return sorted(set(self.affected) | set(self.stale_rows))

    @property
    def ok(self) -> bool:
        """True when nothing is broken."""
        return not self.broken and not self.problems


def fsck(parts: StoreParts, *, full: bool = False, progress: Progress | None = None) -> FsckReport:
    """Check the store ``parts`` belong to. Quick: walk every live commit's graph, decoding and re-hashing each tree and commit and
    checking blobs exist, and compare each live index row's copies of the object's fields (parents, tree, time,
    run, trigger, meta, alias) with its commit object. Full: also re-hash every blob and every unreachable
    object. A database file too damaged to read is one problem in the report (with the
    way out), not an exception."""
    try:
        bound = ObjectBound(doing="check")  # every object is decoded under the read limit (never inflated past it)
        report, too_large = _fsck(parts, full, progress, bound)
        extra = (_database_problems(parts, full) + _graph_problems(parts) + reflog_problems(parts)
                 + (_shape_problems(parts, {**report.broken, **dict.fromkeys(too_large, "")}, bound) if full else []))
        return dataclasses.replace(report, problems=report.problems + extra) if extra else report
    except CorruptStore as e:
        return FsckReport({}, {}, 0, [f"the store itself is damaged ({e}); {parts.backend.recovery_advice()}"])


def _fsck(parts: StoreParts, full: bool, progress: Progress | None,
          bound: ObjectBound) -> tuple[FsckReport, set[str]]:
    """The object walk; also returns the ids (hex) of objects over the read limit (one problem each)."""
    b, objects, refs, index = parts.objects.backend, parts.objects, parts.refs, parts.index
    broken: dict[bytes, str] = {}
    problems: list[str] = []
    too_large: set[str] = set()

    def over(oid: bytes, e: DocumentTooLarge) -> None:
        if oid.hex() not in too_large:
            too_large.add(oid.hex())
            problems.append(f"{e} (fsck did not decompress it)")

    children: dict[bytes, list[bytes]] = {}
    root_kind: dict[bytes, int] = {}
    checked = 0
    commits = {r.id: r for r in index.index_rows()}
    ref_targets = refs.refs()
    stored = b.get_many([t for t in ref_targets.values() if len(t) == ob.ID_BYTES and t not in commits])
    for name, t in ref_targets.items():
        bad_name = ref_name_problem(name)
        if bad_name is not None:
            fix = (f"delete it with `ckpt branch -D {_shell_quoted(name[len(HEADS):])}`" if name.startswith(HEADS)
                   else "delete it in the store it came from and fetch again")
            problems.append(f"ref {name!r} has a name crewckpt never writes ({bad_name}); a store from elsewhere "
                            f"made it; {fix}")
        if len(t) != ob.ID_BYTES:
            problems.append(f"ref {name} is malformed: it holds {len(t)} byte(s) ({t[:32].hex()}), not a "
                            f"{ob.ID_BYTES}-byte commit id; {ref_fix(name)}")
        elif t in commits:
            continue
        elif t not in stored:
            problems.append(f"ref {name} points at missing commit {t.hex()}; {ref_fix(name)}")
        elif stored[t].kind != ob.COMMIT:
            problems.append(f"ref {name} names {t.hex()}, a {_kind(stored[t].kind)}, not a commit; {ref_fix(name)}")
    problems.extend(head.problems(refs))
    # a ref may name a commit no index row lists (a branch started at a pruned checkpoint or a transfer's
    # leftover): gc keeps its graph from the ref, so fsck checks it too (git fsck walks from every ref)
    roots: dict[bytes, IndexRow | None] = {**commits, **{t: None for t in ref_targets.values()
                                                         if t in stored and stored[t].kind == ob.COMMIT}}
    stale: dict[str, str] = {}
    for listed in commits.values():  # the index's own fields: reads cannot fall back to the object for these
        why = row_damage(listed)
        if why is not None:
            stale[bytes(listed.id).hex()[:64]] = f"damaged: {why}"
            problems.append(f"commit index row of {bytes(listed.id).hex()[:64]} is damaged: {why}; {REBUILD}")
    for cid, row in roots.items():
        try:
            c = objects.commit(cid, budget=bound)
            checked += 1
            children[cid] = [c.tree.oid]
            root_kind[c.tree.oid] = c.tree.kind  # a tree, or a blob: a document that is one long string
            for p, n in repeated_parents(c.parents).items():  # objects_format.md 5.3: a writer lists a parent once
                problems.append(f"commit {cid.hex()} lists parent {p.hex()} {_times(n)} (written by another store; "
                                f"readers follow it once, and its id keeps both: nothing to repair)")
            # branch, seq and summary are the index's own (local) fields; the rest copies the object. Walks,
            # info and resume use the object, but listing shows the row: a disagreement is always reported
            if row is not None and cid.hex() not in stale and not row_matches(row, c):
                why = f"disagrees with its commit object ({', '.join(row_differences(row, c))})"
                stale[cid.hex()] = why
                problems.append(f"commit index row of {cid.hex()} {why}: listings show the row, history "
                                f"and resume use the object; {REBUILD}")
        except (MissingObject, IntegrityError) as e:
            broken[cid] = _why(e)
            children[cid] = []
        except DocumentTooLarge as e:
            over(cid, e)
            children[cid] = []
    level = [x for cid in roots for x in children.get(cid, [])]
    # object -> (the kind its first link says it is, the tree or commit linking it)
    linked_as = {t: (root_kind.get(t, ob.TREE), cid) for cid in roots for t in children.get(cid, [])}
    while level:
        todo = [o for o in dict.fromkeys(level) if o not in children and o not in broken]
        level = []
        found = b.get_many(todo)
        for o in todo:
            s = found.get(o)
            if s is None:
                broken[o] = "missing"
                continue
            want, parent = linked_as.get(o, (ob.TREE, o))
            if s.kind != want and not full:  # a reader decodes it as its link says (full: _shape_problems)
                broken[parent] = f"links {o.hex()} as a {_kind(want)}, but it is a {_kind(s.kind)}"
                children[o] = []
                continue
            if s.kind != ob.TREE and not full:
                children[o] = []
                checked += 1  # it exists; full re-hashes it, and counts it once too
                continue
            try:
                body = objects.verify_read(s, budget=bound)  # re-read when a concurrent merge moved it
                if body is None:
                    broken[o] = "missing"
                    continue
                checked += 1
                links = list(links_in(ob.decode_tree(body)[1])) if s.kind == ob.TREE else []
                for ln in links:
                    linked_as.setdefault(ln.oid, (ln.kind, o))
                    if ln.oid in roots and not full:
                        broken[o] = f"links {ln.oid.hex()} as a {_kind(ln.kind)}, but it is a commit"
                kids = [ln.oid for ln in links]
            except (IntegrityError, MissingObject) as e:
                broken[o] = _why(e) if isinstance(e, IntegrityError) else f"its pack {e.oid} is missing"
                kids = []
            except DocumentTooLarge as e:
                over(o, e)
                kids = []
            except Exception as e:  # a tree body that does not decode
                broken[o] = f"does not decode: {e}"
                kids = []
            children[o] = kids
            level.extend(kids)
        if progress:
            progress("check", len(children), None)
    other = 0
    if full:
        for m in b.iter_objects():
            oid = m.oid
            if oid in children or oid in broken or oid.hex() in too_large:
                continue
            s = b.get(oid)
            if s is None:
                continue
            try:
                if objects.verify_read(s, budget=bound) is not None:  # None: collected since the listing
                    other += 1
            except (IntegrityError, MissingObject) as e:
                broken[oid] = _why(e)
            except DocumentTooLarge as e:
                over(oid, e)
    affected = _affected(roots, children, broken)
    return FsckReport({k.hex(): v for k, v in broken.items()}, affected, checked, problems, other,
                      stale), too_large


def _shell_quoted(text: str) -> str:
    """``text`` as a POSIX shell word: ``'plain'``, or bash's ``$'...'`` with escapes for control characters."""
    if text.isprintable() and "'" not in text:
        return f"'{text}'"
    return "$'" + text.encode("unicode_escape").decode("ascii").replace("'", "\\'") + "'"


def _times(n: int) -> str:
    return "twice" if n == 2 else f"{n} times"


def _why(e: Exception) -> str:
    """The reason alone (the errors' own advice to run fsck would be circular here)."""
    if isinstance(e, MissingObject):
        return "missing"
    return e.why if isinstance(e, IntegrityError) else str(e)


def _affected(commits: Mapping[bytes, object], children: dict[bytes, list[bytes]],
              broken: dict[bytes, str]) -> dict[str, list[str]]:
    """Live commit -> broken objects under it; memoized post-order over the object graph (no recursion)."""
    if not broken:
        return {}
    under: dict[bytes, frozenset[bytes]] = {}
    empty: frozenset[bytes] = frozenset()
    for root in commits:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node in under:
                continue
            kids = children.get(node, [])
            if not expanded:
                stack.append((node, True))
                stack.extend((k, False) for k in kids if k not in under)
                continue
            acc: set[bytes] = {node} if node in broken else set()
            for k in kids:
                acc |= under.get(k, empty)
            under[node] = frozenset(acc) if acc else empty
    return {c.hex(): sorted(x.hex() for x in under[c]) for c in commits if under.get(c)}


def _database_problems(parts: StoreParts, full: bool) -> list[str]:
    """SQLite's own check of the database file (``quick_check``; ``integrity_check`` with --full): damage
    below the rows crewckpt reads (a broken index, a page two tables claim) shows here first."""
    check = getattr(parts.backend, "database_check", None)
    if check is None:
        return []
    advice = parts.backend.recovery_advice()
    return [f"SQLite {'integrity_check' if full else 'quick_check'}: {line}; {advice}" for line in check(full)]


def _graph_problems(parts: StoreParts) -> list[str]:
    """Parent edges that break "a parent is older than its child" (a self-parent, a cycle in the commit
    index): walks refuse to follow them (objects_format.md 7.1); fsck names each."""
    rows = {r.id: r for r in parts.index.index_rows()}
    out = []
    for cid, r in rows.items():
        for p in r.parents:
            if p == cid:
                out.append(f"commit {cid.hex()} lists itself as its own parent")
            elif p in rows and isinstance(rows[p].seq, int) and isinstance(r.seq, int) and rows[p].seq >= r.seq:
                out.append(f"commit {cid.hex()} has parent {p.hex()} that is not older (a parent cycle in the "
                           f"commit index)")
    return out


def _shape_problems(parts: StoreParts, broken: Mapping[str, str], bound: ObjectBound) -> list[str]:
    """What hashes cannot see (fsck --full): every link names an object of the kind it says (a tree link a
    tree, a string link a blob), chunk lists hold children of their form, strings decode as UTF-8 (WTF-8),
    refs name commits. Each distinct object is looked at once; objects already reported broken are skipped."""
    b, objects = parts.objects.backend, parts.objects
    problems: list[str] = []
    want: dict[bytes, tuple[int, bytes, tuple[int, ...] | None]] = {}  # oid -> (kind, referrer, forms allowed)
    roots: list[tuple[bytes, ob.Link]] = []
    listed = [r.id for r in parts.index.index_rows()]
    tips = [t for t in parts.refs.refs().values() if len(t) == ob.ID_BYTES]
    for cid in dict.fromkeys([*listed, *tips]):  # what gc keeps: listed commits and every ref's tip
        with contextlib.suppress(CkptError):
            c = objects.commit(cid, budget=bound)
            roots.append((cid, c.tree))
            want.setdefault(c.tree.oid, (c.tree.kind, cid, None))
    seen: set[bytes] = set()
    trees: dict[bytes, tuple[int, Any]] = {}
    blob_sizes: dict[bytes, int] = {}
    while want:
        batch, want = want, {}
        stored = b.get_many(list(batch))
        kinds = {o: s.kind for o, s in stored.items()}
        blob_sizes.update((o, s.size) for o, s in stored.items() if s.kind == ob.BLOB)
        for oid, (kind, parent, forms) in batch.items():
            if oid in seen or oid.hex() in broken or oid not in kinds:
                continue
            seen.add(oid)
            if kinds[oid] != kind:
                problems.append(f"{parent.hex()} links {oid.hex()} as a {_kind(kind)}, but it is a {_kind(kinds[oid])}")
                continue
            try:
                if kind == ob.BLOB:
                    if forms is None:  # a whole string (chunk pieces may split a character)
                        ob.bytes_str(objects.blobs([oid], budget=bound)[oid])
                    continue
                form, payload = trees[oid] = objects.trees([oid], budget=bound)[oid]
            except CkptError as e:
                problems.append(f"object {oid.hex()}: {e}")
                continue
            if forms is not None and form not in forms:
                problems.append(f"chunk list {parent.hex()} holds {oid.hex()} of form {form}, expected one of "
                                f"{sorted(forms)}")
                continue
            if form == ob.STRING_CHUNKS and forms != _CHILD_FORMS[ob.STRING_CHUNKS]:  # whole strings only
                problems.extend(_string_problem(objects, oid))
            for ln in links_in(payload):
                want.setdefault(ln.oid, (ln.kind, oid, _CHILD_FORMS.get(form)))
    return problems + _size_problems(roots, trees, blob_sizes)


def _size_problems(roots: list[tuple[bytes, ob.Link]], trees: dict[bytes, tuple[int, Any]],
                   blob_sizes: dict[bytes, int]) -> list[str]:
    """Live commits whose document is over the default read limits (a tree linking shared subtrees many
    times, nesting past 255 levels): `read` would refuse them; sized over distinct trees, memo shared."""
    from crewckpt.history.snapshot import expanded_size

    memo: dict[bytes, tuple[int, int, int]] = {}
    out = []
    for cid, root in roots:
        try:
            ReadBudget(what=f"commit {cid.hex()}").check_expanded(*expanded_size(root, trees, blob_sizes, memo))
        except (KeyError, IntegrityError):  # an object missing or malformed: reported above
            continue
        except CkptError as e:
            out.append(str(e))
    return out


_CHILD_FORMS = {ob.OBJECT_CHUNKS: (ob.OBJECT, ob.OBJECT_CHUNKS), ob.ARRAY_CHUNKS: (ob.ARRAY, ob.ARRAY_CHUNKS),
                ob.STRING_CHUNKS: (ob.STRING_CHUNKS,)}


def _string_problem(objects: ObjectDB, oid: bytes) -> list[str]:
    """A STRING_CHUNKS tree whose concatenated pieces are not UTF-8 (WTF-8)."""
    from crewckpt.history.snapshot import _chunk_leaves, prefetch

    try:
        budget = ReadBudget(what=f"string tree {oid.hex()}", doing="check", kwargs=False)  # the string is joined
        t, blobs = prefetch(ob.Link(oid, ob.TREE), lambda o: objects.trees(o, budget=budget),
                            lambda o: objects.blobs(o, budget=budget))
        ob.bytes_str(b"".join(blobs[ln.oid] for ln in _chunk_leaves(oid, t, ob.STRING_CHUNKS, None)))
    except CkptError as e:
        return [f"string tree {oid.hex()}: {e}"]
    return []


def reflog_problems(parts: StoreParts) -> list[str]:
    """One problem per reflog value (of HEAD and of every ref) that cannot name a commit: not a 32-byte id,
    or an object of another kind. An id that is not stored is no problem: reflogs outlive pruned commits."""
    refs, b = parts.refs, parts.objects.backend
    logs = {name: refs.reflog(name) for name in dict.fromkeys([head.HEAD, *refs.refs()])}
    named = {t for log in logs.values() for e in log for t in (e.old, e.new) if t is not None}
    stored = b.get_many([t for t in named if len(t) == ob.ID_BYTES])
    problems: list[str] = []
    for name, log in logs.items():
        label = name[len(HEADS):] if name.startswith(HEADS) else name
        bad: dict[int, str] = {}  # N of label@{N} -> what is wrong with the value it names
        for i, e in enumerate(log):  # git's numbering: @{0} is the newest entry's new side
            for n, t in ((len(log) - 1 - i, e.new), (len(log) - i, e.old)):
                if t is None or n in bad:
                    continue
                if len(t) != ob.ID_BYTES:
                    bad[n] = f"is malformed: it holds {len(t)} byte(s) ({t[:32].hex()}), not a commit id"
                elif t in stored and stored[t].kind != ob.COMMIT:
                    bad[n] = f"names {t.hex()}, a {_kind(stored[t].kind)}, not a commit"
        problems.extend(f"reflog entry {label}@{{{n}}} {why}: the reflog is damaged (`ckpt reflog {label}` shows "
                        f"it; revisions naming it are refused)" for n, why in sorted(bad.items()))
    return problems


def _kind(kind: int) -> str:
    return ob.KIND_NAMES.get(kind, b"object").decode()
