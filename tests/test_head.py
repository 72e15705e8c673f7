"""HEAD as a symbolic ref to the current branch, with its own reflog (issue 14, item 2).

As in git: HEAD names a branch (unborn in a fresh store), commits move the branch they are written on and
HEAD's reflog only when HEAD names that branch, ``ckpt switch`` / ``checkout`` choose the current branch,
``HEAD@{N}`` reads HEAD's reflog, ``@{N}`` the current branch's, ``@{-N}`` the N-th previous branch, and
``latest`` is the last commit written on any branch.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest
from cli_helpers import ckpt, ndjson, ok

from crewckpt.backends.base import Backend, writing
from crewckpt.backends.memory import MemoryBackend
from crewckpt.backends.sqlite import SqliteBackend
from crewckpt.errors import BranchInUse, UnknownRevision
from crewckpt.history.store import Store


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    s = Store.memory() if request.param == "memory" else Store.init(tmp_path / ".ckpt")
    yield s
    s.close()


def _one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    msg = str(exc.value)
    assert "\n" not in msg and len(msg) < 300, msg
    return msg


# -- backend verbs ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_backend_symref_is_set_atomically_and_read_back(kind: str, tmp_path: Path) -> None:
    b: Backend = MemoryBackend() if kind == "memory" else SqliteBackend.create(tmp_path)
    assert b.get_symref("HEAD") is None
    with b.transaction() as t:
        t.set_symref("HEAD", "refs/heads/main")
        assert t.get_symref("HEAD") == "refs/heads/main"
    with pytest.raises(RuntimeError):
        with b.transaction() as t:
            t.set_symref("HEAD", "refs/heads/exp")
            raise RuntimeError("crash")
    assert b.get_symref("HEAD") == "refs/heads/main"  # the failed transaction left nothing
    b.close()


# -- Python API ------------------------------------------------------------------------------------------------


def test_a_fresh_store_has_head_on_unborn_main(store: Store) -> None:
    assert store.current_branch() == "main" and store.reflog("HEAD") == []
    for rev in ("HEAD", "@", "HEAD~1", "@{0}"):
        with pytest.raises(UnknownRevision) as e:
            store.resolve(rev)
        assert "no checkpoints yet" in _one_line(e) or "no reflog entries" in str(e.value)
    exp = store.commit({"n": 1}, branch="exp")  # a writer on another branch does not switch HEAD
    assert store.current_branch() == "main" and store.resolve("latest") == exp
    with pytest.raises(UnknownRevision) as e:
        store.resolve("HEAD")
    assert _one_line(e) == ("revision 'HEAD': HEAD is on branch 'main', which has no checkpoints yet; switch to a "
                            "branch that has some with `ckpt switch BRANCH` (branches: exp)")
    first = store.commit({"n": 2})  # creates main: HEAD is born
    assert store.resolve("HEAD") == first and [e.new.hex() for e in store.reflog("HEAD")] == [first]


def test_commits_move_head_only_on_its_branch_and_its_reflog_records_each_move(store: Store) -> None:
    m1 = store.commit({"n": 1}, trigger="task_completed")
    m2 = store.commit({"n": 2})
    e1 = store.commit({"n": 3}, branch="exp", parents=[m1])  # another writer's branch: HEAD stays
    assert store.resolve("HEAD") == m2 and store.resolve("latest") == e1
    assert store.switch("exp") == "main"
    e2 = store.commit({"n": 4}, branch="exp")
    store.commit({"n": 5}, branch="main")  # main moves, HEAD (on exp) does not
    log = store.reflog("HEAD")
    assert [(e.old.hex() if e.old else None, e.new.hex() if e.new else None, e.message) for e in log] == [
        (None, m1, "commit: task_completed"),
        (m1, m2, "commit: manual"),
        (m2, e1, "checkout: moving from main to exp"),
        (e1, e2, "commit: manual"),
    ]
    assert [e.time_ns for e in log] == sorted(e.time_ns for e in log)
    r = store.resolve
    assert r("HEAD") == r("@") == r("HEAD@{0}") == e2
    assert r("HEAD@{1}") == e1 and r("HEAD@{2}") == m2 and r("HEAD@{3}") == m1
    # @{N} is the current branch's reflog (exp@{N}), not HEAD's, as in git
    assert r("@{0}") == e2 and r("@{1}") == e1 and r("@{1}") == r("exp@{1}") and r("HEAD@{1}~1") == m1
    assert r("main@{0}") != e2 and r("main@{1}") == m2
    assert r("@{-1}") == r("main") and store.previous_branch() == "main"


def test_reflog_selectors_out_of_range_are_one_line_and_name_the_fix(store: Store) -> None:
    store.commit({"n": 1})
    store.commit({"n": 2})
    expected = {
        "HEAD@{2}": "revision 'HEAD@{2}': HEAD has only 2 reflog entries (HEAD@{0} to HEAD@{1}); see "
                    "`ckpt reflog HEAD`",
        "@{5}": "revision '@{5}': main has only 2 reflog entries (main@{0} to main@{1}); see `ckpt reflog main`",
        "main@{9}": "revision 'main@{9}': main has only 2 reflog entries (main@{0} to main@{1}); see "
                    "`ckpt reflog main`",
        "nope@{1}": "revision 'nope@{1}': no branch named 'nope'; see `ckpt branch`",
        "@{-1}": "revision '@{-1}': HEAD was on fewer than 1 other branch(es); see `ckpt reflog HEAD`",
    }
    for rev, message in expected.items():
        with pytest.raises(UnknownRevision) as e:
            store.resolve(rev)
        assert _one_line(e) == message
    with pytest.raises(UnknownRevision, match="stands alone"):
        store.resolve("main@{-1}")


def test_switch_create_rename_and_delete_follow_git(store: Store) -> None:
    m1 = store.commit({"n": 1})
    m2 = store.commit({"n": 2})
    assert store.switch("main") == "main" and len(store.reflog("HEAD")) == 2  # already on it: no entry
    with pytest.raises(UnknownRevision) as e:
        store.switch("nope")
    assert "create it with `ckpt switch -c nope [START]`" in _one_line(e)
    assert store.switch("try", create=True, start="main~1") == "main"
    assert store.current_branch() == "try" and store.resolve("HEAD") == m1
    assert store.reflog("HEAD")[-1].message == "checkout: moving from main to try"
    assert store.reflog("try")[0].message == "branch: created from main~1"
    store.rename_branch("try", "experiment")  # HEAD follows a rename of the current branch
    assert store.current_branch() == "experiment" and store.resolve("HEAD") == m1
    last = store.reflog("HEAD")[-1]
    assert (last.old, last.new, last.message) == (last.new, bytes.fromhex(m1), "branch: renamed try to experiment")
    with pytest.raises(BranchInUse) as e:
        store.delete_branch("experiment")
    assert _one_line(e) == ("cannot delete branch 'experiment': it is the current branch (HEAD); switch to "
                            "another first with `ckpt switch BRANCH`")
    assert store.branches()["experiment"] == m1  # nothing changed
    store.rename_branch("main", "trunk")  # not the current branch: HEAD stays
    assert store.current_branch() == "experiment"
    assert store.switch("trunk") == "experiment" and store.resolve("HEAD") == m2
    store.delete_branch("experiment")
    assert store.previous_branch() == "experiment"  # the reflog still says so; @{-1} then names nothing
    with pytest.raises(UnknownRevision, match="branch 'experiment' no longer exists"):
        store.resolve("@{-1}")


def test_a_commit_without_a_branch_goes_on_the_current_branch_as_git_commit_does(tmp_path: Path) -> None:
    """``Store.commit(doc)`` writes on HEAD's branch (it used to write on ``main`` whatever HEAD named, so
    ``ckpt log`` did not show it); an explicit ``branch=`` still wins and leaves HEAD alone."""
    path = tmp_path / ".ckpt"
    with Store.init(path) as s:
        m1 = s.commit({"n": 1})
        s.switch("exp", create=True)
    with Store.open(path) as s:
        e1 = s.commit({"n": 2})
        assert s.info(e1).branch == "exp" and s.info(e1).parents == (m1,)
        assert s.branches() == {"exp": e1, "main": m1} and s.resolve("HEAD") == e1
        assert s.reflog("HEAD")[-1].message == "commit: manual"
        m2 = s.commit({"n": 3}, branch="main")  # explicit: main moves, HEAD stays on exp
        assert s.current_branch() == "exp" and s.info(m2).parents == (m1,)
    assert ok(ckpt(str(path), "log", "--oneline")).stdout.splitlines()[0].startswith(e1[:8] + " (HEAD -> exp)")
    clone = tmp_path / "clone"
    with Store.clone(str(path), clone) as c:  # the clone's HEAD is the source's current branch
        assert c.current_branch() == "exp"
        e2 = c.commit({"n": 4})
        assert c.branches()["exp"] == e2 and c.branches()["main"] == m2 and c.info(e2).parents == (e1,)


def test_a_commit_without_a_branch_on_an_unborn_head_creates_that_branch(store: Store) -> None:
    """As git's first commit on an unborn branch: the branch HEAD names is created with a root commit."""
    store.commit({"n": 0}, branch="other")
    with writing(store.backend) as w:
        w.set_symref("HEAD", "refs/heads/dev")  # what `ckpt init` of a store whose HEAD names dev would leave
    assert store.current_branch() == "dev" and "dev" not in store.branches()
    d1 = store.commit({"n": 1})
    assert store.branches()["dev"] == d1 and store.info(d1).parents == () and store.info(d1).branch == "dev"
    assert [e.new.hex() for e in store.reflog("HEAD") if e.new] == [d1]


def _drop_stored_head(folder: Path) -> None:
    """Make ``folder``'s store look like one written before HEAD was stored (no symbolic ref, no HEAD log)."""
    with sqlite3.connect(folder / "store.db") as c:
        c.execute("DELETE FROM meta WHERE key = 'symref:HEAD'")
        c.execute("DELETE FROM reflog WHERE ref = 'HEAD'")
    c.close()


def test_a_store_without_a_stored_head_opens_on_the_branch_of_its_last_commit(tmp_path: Path) -> None:
    path = tmp_path / ".ckpt"
    with Store.init(path) as s:
        main = s.commit({"n": 1})
        exp = s.commit({"n": 2}, branch="exp", parents=[])
    _drop_stored_head(path)
    with Store.open(path) as s:
        assert s.current_branch() == "exp" and s.resolve("HEAD") == exp  # what HEAD meant before
        assert s.reflog("HEAD") == []
        newer = s.commit({"n": 3}, branch="main")  # the first write stores HEAD: no longer the last write's
        assert s.current_branch() == "exp" and s.resolve("HEAD") == exp and s.branches()["main"] == newer
    with Store.open(path) as s:
        assert s.current_branch() == "exp"
        s.switch("main")
        s.delete_branch("exp")
    _drop_stored_head(path)
    with Store.open(path) as s:
        assert s.current_branch() == "main" and s.resolve("HEAD") == newer != main
    with sqlite3.connect(path / "store.db") as c:  # a damaged value is ignored (with a warning), not fatal
        c.execute("INSERT INTO meta(key, value) VALUES ('symref:HEAD', 'refs/heads/..bad')")
    c.close()
    with Store.open(path) as s:
        assert s.current_branch() == "main"
        assert s.fsck().problems == ["HEAD holds 'refs/heads/..bad', not a branch ref (read meanwhile as the branch "
                                     "of the last checkpoint written, else main); set it with `ckpt switch BRANCH`"]
        s.switch("main")  # the fix fsck names: the stored value is replaced, and fsck is clean again
        assert s.fsck().ok and s.backend.get_symref("HEAD") == "refs/heads/main"


def test_the_format1_fixture_store_opens_with_head_on_its_last_written_branch(tmp_path: Path) -> None:
    import shutil

    src = Path(__file__).parent / "data" / "format1-store"
    if not src.is_dir():
        pytest.skip("format-1 fixture store not present")
    shutil.copytree(src, tmp_path / "s")
    with Store.open(tmp_path / "s") as s:
        last = max(s.list(), key=lambda c: c.seq)
        expected = last.branch if last.branch in s.branches() else "main"
        assert s.current_branch() == expected
        assert s.resolve("HEAD") == s.branches()[expected]


# -- CLI ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def two_branches(tmp_path: Path) -> tuple[str, list[str], list[str]]:
    path = tmp_path / ".ckpt"
    with Store.init(path) as s:
        main = [s.commit({"n": i}, trigger="task_completed") for i in range(3)]
        exp = [s.commit({"n": "e"}, branch="exp", parents=[main[0]])]
    return str(path), main, exp


def test_cli_switch_checkout_and_head_reflog(two_branches: tuple[str, list[str], list[str]]) -> None:
    path, main, exp = two_branches
    assert ok(ckpt(path, "switch", "exp")).stdout == "Switched to branch 'exp'\n"
    assert ok(ckpt(path, "switch", "exp")).stdout == "Already on 'exp'\n"
    lines = ok(ckpt(path, "reflog")).stdout.splitlines()  # no argument: HEAD, as in git
    assert lines == ok(ckpt(path, "reflog", "HEAD")).stdout.splitlines()
    assert [line.split(" ", 1)[1].rsplit("  ", 1)[0] for line in lines] == [
        "HEAD@{0}: checkout: moving from main to exp",
        "HEAD@{1}: commit: task_completed",
        "HEAD@{2}: commit: task_completed",
        "HEAD@{3}: commit: task_completed",
    ]
    records = ndjson(ok(ckpt(path, "reflog", "HEAD", "--json")).stdout)
    assert [r["id"] for r in records] == [exp[0], main[2], main[1], main[0]]
    assert [r["selector"] for r in records] == [f"HEAD@{{{n}}}" for n in range(4)]
    for r in records:
        assert ok(ckpt(path, "rev-parse", r["selector"])).stdout.strip() == r["id"]
    assert ok(ckpt(path, "rev-parse", "@")).stdout.strip() == exp[0]
    assert ok(ckpt(path, "rev-parse", "@{0}")).stdout.strip() == exp[0]
    assert ok(ckpt(path, "rev-parse", "HEAD@{1}")).stdout.strip() == main[2]
    out_of_range = ckpt(path, "rev-parse", "@{1}")  # exp has one reflog entry
    assert out_of_range.exit_code == 1 and out_of_range.stderr == (
        "ckpt: error: revision '@{1}': exp has only 1 reflog entries (exp@{0} to exp@{0}); see `ckpt reflog exp`\n"
    )
    # `ckpt log`, `show HEAD`, `branch` and the log decoration follow the current branch
    assert ok(ckpt(path, "log", "--oneline")).stdout.splitlines()[0].startswith(exp[0][:8] + " (HEAD -> exp)")
    assert orjson.loads(ok(ckpt(path, "show", "HEAD", "--raw")).stdout) == {"n": "e"}
    assert [line[:6] for line in ok(ckpt(path, "branch")).stdout.splitlines()] == ["* exp ", "  main"]
    record = orjson.loads(ok(ckpt(path, "checkout", "-", "--json")).stdout)
    assert record == {"branch": "main", "previous": "exp", "tip": main[2], "created": False}
    assert ok(ckpt(path, "checkout", "-b", "try", "main~2")).stdout == "Switched to a new branch 'try'\n"
    assert ok(ckpt(path, "rev-parse", "HEAD")).stdout.strip() == main[0]
    assert ok(ckpt(path, "switch", "@{-2}")).stdout == "Switched to branch 'exp'\n"
    assert ok(ckpt(path, "switch", "-c", "new")).stdout == "Switched to a new branch 'new'\n"
    assert ok(ckpt(path, "rev-parse", "new")).stdout.strip() == exp[0]


def test_cli_switch_errors_are_one_line_and_change_nothing(two_branches: tuple[str, list[str], list[str]]) -> None:
    path, main, exp = two_branches
    cases = {
        ("switch", "nope"): (1, "no branch named 'nope'; create it with `ckpt switch -c nope [START]` "
                                "(branches: exp, main)"),
        ("checkout", main[1][:10]): (2, f"{main[1][:10]!r} is a checkpoint, not a branch (HEAD always names a "
                                        f"branch); start a branch there with `ckpt checkout -b NAME {main[1][:10]}`; "
                                        f"see `ckpt checkout --help`"),
        ("switch", "exp", "main~1"): (2, "START goes with -c: ckpt switch -c exp main~1; see `ckpt switch --help`"),
        ("switch", "-"): (1, "-: HEAD was on fewer than 1 other branch(es); see `ckpt reflog`"),
        ("switch", "-c", "exp"): (1, "branch 'exp' already exists; pick another name or delete it first"),
        ("switch", "bad..name"): (2, None),
        ("branch", "-d", "main"): (1, "cannot delete branch 'main': it is the current branch (HEAD); switch to "
                                      "another first with `ckpt switch BRANCH`"),
    }
    for argv, (code, message) in cases.items():
        result = ckpt(path, *argv)
        assert result.exit_code == code, (argv, result.stderr)
        assert result.stderr.count("\n") == 1 and result.stderr.startswith("ckpt: error: ")
        if message is not None:
            assert result.stderr == f"ckpt: error: {message}\n", argv
    with Store.open(path) as s:
        assert s.current_branch() == "main" and s.branches() == {"exp": exp[0], "main": main[2]}
        assert len(s.reflog("HEAD")) == 3


def test_cli_branch_rename_of_the_current_branch_moves_head(two_branches: tuple[str, list[str], list[str]]) -> None:
    path, main, _ = two_branches
    ok(ckpt(path, "branch", "-m", "main", "trunk"))
    assert [line[:8] for line in ok(ckpt(path, "branch")).stdout.splitlines()] == ["  exp   ", "* trunk "]
    first = ndjson(ok(ckpt(path, "reflog", "--json")).stdout)[0]
    assert first["message"] == "branch: renamed main to trunk" and first["id"] == first["old"] == main[2]


def test_cli_log_on_an_unborn_head_says_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / ".ckpt"
    Store.init(path).close()
    empty = ckpt(str(path), "log")
    assert empty.exit_code == 1 and empty.stderr.count("\n") == 1 and "no checkpoints yet" in empty.stderr
    with Store.open(path) as s:
        s.commit({"n": 1}, branch="exp")
    unborn = ckpt(str(path), "log")
    assert unborn.exit_code == 1 and unborn.stderr == (
        "ckpt: error: revision 'HEAD': HEAD is on branch 'main', which has no checkpoints yet; switch to a "
        "branch that has some with `ckpt switch BRANCH` (branches: exp)\n"
    )
    assert ok(ckpt(str(path), "branch")).stdout.startswith("  exp ")  # no `*`: HEAD's branch is unborn
    assert ok(ckpt(str(path), "reflog")).stdout == ""
    ok(ckpt(str(path), "switch", "exp"))
    assert "(HEAD -> exp)" in ok(ckpt(str(path), "log")).stdout


def test_head_at_n_follows_gits_rule_at_the_start_of_a_reflog(tmp_path: Path) -> None:
    """git's read_ref_at: ``@{n}`` is the old side of the (n-1)-th newest entry, so a reflog that starts
    mid-history (a store upgraded to a stored HEAD) still answers ``HEAD@{1}``, and says up to where."""
    path = tmp_path / ".ckpt"
    with Store.init(path) as s:
        s.commit({"n": 1})
        m2 = s.commit({"n": 2})
    _drop_stored_head(path)
    with Store.open(path) as s:
        m3 = s.commit({"n": 3})
        assert [(e.old.hex() if e.old else None, e.new.hex() if e.new else None) for e in s.reflog("HEAD")] == [
            (m2, m3)]
        assert s.resolve("HEAD@{0}") == m3 and s.resolve("HEAD@{1}") == m2
        with pytest.raises(UnknownRevision) as e:
            s.resolve("HEAD@{2}")
        assert _one_line(e) == ("revision 'HEAD@{2}': HEAD has only 1 reflog entries (HEAD@{0} to HEAD@{1}); see "
                                "`ckpt reflog HEAD`")


def test_sqlite_reflog_keeps_an_old_id_that_repeats_the_previous_new_in_no_bytes(tmp_path: Path) -> None:
    """HEAD's reflog doubles the reflog rows of commits on the current branch (git's logs/HEAD does too):
    SQLite stores a record's old id as x'' when it is the previous record's new id, nearly every record, so
    the doubling costs about half as much on disk. Readers see the same entries."""
    from crewckpt.backends.base import ReflogEntry

    b = SqliteBackend.create(tmp_path)
    ids = [bytes([i]) * 32 for i in range(4)]
    with b.transaction() as t:
        t.reflog_append(ReflogEntry("HEAD", None, ids[0], 1, "a"))
        t.reflog_append(ReflogEntry("HEAD", ids[0], ids[1], 2, "b"))  # continues the chain: x''
        t.reflog_append(ReflogEntry("HEAD", ids[3], ids[2], 3, "c"))  # does not: stored in full
        t.reflog_append(ReflogEntry("refs/heads/x", ids[2], ids[2], 4, "d"))  # another ref: its own chain
    assert [(e.old, e.new) for e in b.reflog("HEAD")] == [(None, ids[0]), (ids[0], ids[1]), (ids[3], ids[2])]
    assert [(e.old, e.new) for e in b.reflog("refs/heads/x")] == [(ids[2], ids[2])]
    b.close()
    with sqlite3.connect(tmp_path / "store.db") as c:
        assert [r[0] for r in c.execute("SELECT length(old) FROM reflog ORDER BY n")] == [None, 0, 32, 32]
    c.close()


def test_reflog_marks_the_commits_gc_collected(tmp_path: Path) -> None:
    """Fresh-user trial (session 20): after prune + gc, `ckpt reflog` listed collected commits like any other
    and only `ckpt show HEAD@{N}` said they were gone. Each such entry is marked now (git keeps what a reflog
    names until the reflog expires; crewckpt's gc collects pruned commits, which its reflogs may still name)."""
    folder = tmp_path / ".ckpt"
    with Store.init(folder) as s:
        ids = [s.commit({"n": i}) for i in range(3)]
        s.prune("main", keep=1)
        s.gc()
    lines = ok(ckpt(str(folder), "reflog")).stdout.splitlines()
    assert len(lines) == 3 and "collected" not in lines[0], lines  # HEAD@{0}: the live tip
    assert all("(pruned and collected by gc)" in line for line in lines[1:]), lines
    records = ndjson(ok(ckpt(str(folder), "reflog", "main", "--json")).stdout)
    assert [(r["id"], r["collected"]) for r in records] == [(ids[2], False), (ids[1], True), (ids[0], True)]


def test_a_branch_moved_while_it_is_read_is_not_called_damaged(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Hostile review (session 20): reading a branch read its ref, then its target; another process moving the
    branch and gc collecting the old tip in between made `ckpt show main` (resume, log, branch X main...)
    say "ref refs/heads/main names ..., which is not in the store (a damaged ref); delete it with `ckpt branch
    -d main`" (1 in 35,162 real races). A missing target is read again before the ref is called damaged."""
    s = Store.init(tmp_path / ".ckpt")
    old = s.commit({"n": 0})
    new = s.commit({"n": 1})
    s.prune("main", keep=1)
    s.gc()  # `old` is collected: the value the first read below returns, as in the race
    real = s.backend.get_ref
    stale = [bytes.fromhex(old)]

    def racing(name: str) -> bytes | None:
        return stale.pop() if name == "refs/heads/main" and stale else real(name)

    monkeypatch.setattr(s.backend, "get_ref", racing)
    assert s.resolve("main") == new and not stale
    monkeypatch.setattr(s.backend, "get_ref", lambda name: bytes.fromhex(old) if name == "refs/heads/main"
                        else real(name))
    with pytest.raises(UnknownRevision, match="a damaged ref"):  # the same missing value twice: damage
        s.resolve("main")
