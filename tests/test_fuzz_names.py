"""Hostile names (issue 8, item 5): revisions, branch names, and names that try to escape a folder.

Every revision either resolves or raises UnknownRevision/AmbiguousRevision; every branch name is accepted
or raises BadRefName; a name that tries to leave the store or an export folder (``../x``, absolute paths,
NUL, a symlink pointing outside) never creates or deletes anything outside it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from crewckpt.errors import (
    AmbiguousRevision,
    BadRefName,
    BranchExists,
    BranchInUse,
    CkptError,
    UnknownRevision,
)
from crewckpt.history import refnames, revisions
from crewckpt.history.store import Store
from crewckpt.views import layout
from crewckpt.views.transfer import export_checkpoints, import_checkpoints

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])

ESCAPES = ["../x", "../../etc/passwd", "/tmp/abs", "a/../../b", "a\x00b", "..", ".", "a/./b", "a//b", "-rf",
           "a\\..\\b", "~user", "x.lock", ".hidden", "HEAD", "a@{1}", "a b", "\u202e", "a/", "//", "€/../x"]

name_text = st.one_of(st.sampled_from(ESCAPES), st.text(max_size=30),
                      st.text(alphabet="./-_~^:@{}\\ \x00aZ9é", max_size=12))


@FUZZ
@given(name_text)
def test_branch_check_accepts_only_names_that_stay_inside_a_folder(name: str) -> None:
    try:
        n = refnames.check_branch(name)
    except BadRefName as e:
        assert "\n" not in str(e)
        return
    assert layout.branch_is_safe(n), f"{n!r} passes check_branch but would escape an export folder"
    assert not n.startswith(("/", "-")) and "\x00" not in n and ".." not in n


@FUZZ
@given(st.text(max_size=60))
@example("main~99999999999999999999")
@example("main@{99999999999999999999}")
@example("^" * 1000)
@example("a" * 5000)
def test_revision_parser_returns_a_revision_or_unknown_revision(text: str) -> None:
    try:
        r = revisions.parse(text)
        assert r.base or r.reflog is not None  # @{N} and @{-N} have no base (the current branch)
    except UnknownRevision as e:
        assert "\n" not in str(e)


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    s = Store.init(tmp_path_factory.mktemp("rev") / "s")
    for i in range(40):
        s.commit({"i": i}, branch="main" if i % 3 else "dev")
    s.commit({"root": True}, branch="dev", parents=[])
    s.create_branch("fork", "main~3")
    s.prune("main", keep=5)
    yield s
    s.close()


rev_text = st.one_of(
    st.text(max_size=40),
    st.builds(lambda b, sfx: b + "".join(sfx),
              st.sampled_from(["main", "dev", "fork", "HEAD", "latest", "refs/heads/main", "refs/runs/x", "ab",
                               "0000", "abcd", "nope", "main@{0}", "dev@{3}", "main@{999}", "@{1}"]),
              st.lists(st.sampled_from(["~", "^", "~2", "^2", "^0", "~40", "~99999999999", "^3", "@{1}", "~x"]),
                       max_size=5)))


@FUZZ
@given(rev_text)
def test_resolve_gives_an_id_or_a_revision_error(small_store: Store, text: str) -> None:
    try:
        cid = small_store.resolve(text)
    except (UnknownRevision, AmbiguousRevision) as e:
        assert "\n" not in str(e)
        return
    assert len(cid) == 64 and int(cid, 16) >= 0


def test_resolve_of_every_short_prefix(small_store: Store) -> None:
    ids = [c.id for c in small_store.list()]
    for cid in ids:
        for n in (4, 6, 8):
            try:
                assert small_store.resolve(cid[:n]) == cid
            except AmbiguousRevision as e:
                assert cid[:12] in str(e)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@FUZZ
@given(st.lists(name_text, min_size=1, max_size=4))
@example(names=["main"])  # the current branch: delete_branch refuses it (found by CI)
def test_branch_verbs_with_hostile_names_touch_nothing_outside(tmp_path_factory: pytest.TempPathFactory,
                                                              names: list[str]) -> None:
    root = tmp_path_factory.mktemp("names")
    store_path = root / "store"
    s = Store.init(store_path)
    s.commit({"x": 1})
    outside = _tree(root) - {str(p.relative_to(root)) for p in store_path.rglob("*")} - {"store"}
    for name in names:
        for op in (lambda n=name: s.commit({"n": n}, branch=n), lambda n=name: s.create_branch(n, "main"),
                   lambda n=name: s.rename_branch("main", n), lambda n=name: s.delete_branch(n),
                   lambda n=name: s.list(n), lambda n=name: s.prune(n, keep=1)):
            try:
                op()
            except (BadRefName, UnknownRevision, BranchExists, BranchInUse) as e:  # 'main' is HEAD
                assert "\n" not in str(e)
            except ValueError as e:  # prune's own argument errors
                raise AssertionError(f"unexpected ValueError for {name!r}: {e}") from e
    assert s.fsck(full=True).ok
    s.close()
    now = _tree(root) - {str(p.relative_to(root)) for p in store_path.rglob("*")} - {"store"}
    assert now == outside
    assert {p.name for p in store_path.iterdir()} <= {"store.db", "store.db-wal", "store.db-shm", "gc.lock"}


def _crewai_db(path: Path, rows: list[tuple[str, str | None, str]]) -> None:
    conn = sqlite3.connect(path)
    conn.execute(layout.CREATE_TABLE)
    for cid, parent, branch in rows:
        conn.execute("INSERT INTO checkpoints(id, created_at, parent_id, branch, data) VALUES (?,?,?,?,?)",
                     (cid, "20261129T000000", parent, branch, '{"entities": [], "branch": "x"}'))
    conn.commit()
    conn.close()


def test_hostile_crewai_branches_and_ids_never_escape_the_export_folder(tmp_path: Path) -> None:
    rows = [(f"20261129T000000_{i:08x}", None, b) for i, b in enumerate(ESCAPES)]
    rows += [("../../../outside_id", None, "main"), ("/abs_id", None, "main"), ("a/b", None, "main"),
             ("x\x00y", None, "main")]
    db = tmp_path / "in" / "cp.db"
    db.parent.mkdir()
    _crewai_db(db, rows)
    store = Store.init(tmp_path / "s")
    before = _tree(tmp_path)
    rep = import_checkpoints(store, db)  # per-branch: hostile branches are skipped with a reason
    assert all("\n" not in str(p) for p in rep.problems)
    rep2 = import_checkpoints(store, db, branch="all")  # one branch: hostile CrewAI branches kept in meta
    assert rep2.imported
    out = tmp_path / "out" / "deep"
    for fmt, dest in (("json", out / "json"), ("sqlite", out / "view.db")):
        try:
            export_checkpoints(store, dest, fmt=fmt)
        except CkptError as e:
            assert "\n" not in str(e)
    created = _tree(tmp_path) - before
    stray = [p for p in created if not (p.startswith(("out/deep", "s/")) or p == "out")]
    assert stray == []
    json_files = list((out / "json").rglob("*.json"))
    assert json_files and all((out / "json") in p.resolve().parents for p in json_files)
    store.close()


def test_export_does_not_write_through_a_symlink_that_points_outside(tmp_path: Path) -> None:
    store = Store.init(tmp_path / "s")
    store.commit({"entities": [], "v": 1}, branch="main")
    store.commit({"entities": [], "v": 2}, branch="team/a")
    victim = tmp_path / "victim"
    victim.mkdir()
    dest = tmp_path / "view"
    dest.mkdir()
    (dest / "main").symlink_to(victim, target_is_directory=True)
    (dest / "team").symlink_to(victim, target_is_directory=True)
    try:
        export_checkpoints(store, dest, fmt="json")
    except CkptError as e:
        assert "\n" not in str(e)
    assert list(victim.iterdir()) == [], "export wrote through a symlink into a folder outside the view"
    store.close()


def test_import_does_not_follow_symlinked_folders_out_of_the_source(tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "main"
    outside.mkdir(parents=True)
    (outside / "20261129T000000_deadbeef_p-none.json").write_text('{"entities": [], "secret": 1}')
    src = tmp_path / "src"
    (src / "main").mkdir(parents=True)
    (src / "main" / "20261129T000001_0badf00d_p-none.json").write_text('{"entities": []}')
    (src / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
    store = Store.init(tmp_path / "s")
    rep = import_checkpoints(store, src)
    assert [c for c, _ in rep.imported] == ["20261129T000001_0badf00d"]
    store.close()


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["main", "a/b", "..", "x"]),
                          st.text(alphabet="0123456789abcdefT_p-none.json/", max_size=40),
                          st.one_of(st.binary(max_size=60), st.sampled_from([
                              b'{"entities": []}', b'{"entities": [', b'[]', b'null', b'\xff\xfe{}',
                              b'{"entities": [], "branch": "../../x", "parent_id": 5}', b'{"a": NaN}',
                              b'{"entities": {"deep": ' + b'[' * 5000 + b']' * 5000 + b'}}'])),
                          ), max_size=5))
def test_importing_a_hostile_json_folder_reports_problems_instead_of_raising(
        tmp_path_factory: pytest.TempPathFactory, files: list[tuple[str, str, bytes]]) -> None:
    root = tmp_path_factory.mktemp("hostile")
    src = root / "src"
    src.mkdir()
    for folder, name, data in files:
        d = (src / folder).resolve()
        if src.resolve() not in [d, *d.parents]:
            continue
        d.mkdir(parents=True, exist_ok=True)
        p = d / (os.path.basename(name) or "x.json")
        if p.is_dir():
            continue
        p.write_bytes(data)
    store = Store.init(root / "s")
    try:
        rep = import_checkpoints(store, src)
        assert all("\n" not in str(p) for p in rep.problems)
    except CkptError as e:
        assert "\n" not in str(e)
    assert store.fsck(full=True).ok
    store.close()
