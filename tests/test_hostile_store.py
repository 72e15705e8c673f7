"""Stores written by someone else: hand-made rows and objects (built with the format layer) must make every
read bounded and every failure one line (docs/invariants.md, 'Untrusted stores')."""

from __future__ import annotations

import datetime
import sqlite3
import unicodedata
import uuid
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crewckpt import Store
from crewckpt.backends.base import StoredObject
from crewckpt.cli.main import cli
from crewckpt.errors import (
    BadRefName,
    CkptError,
    CorruptStore,
    DocumentTooLarge,
    GcAborted,
    IntegrityError,
    UnknownRevision,
)
from crewckpt.format import objects as ob
from crewckpt.history import snapshot
from crewckpt.history.commits import to_row
from crewckpt.history.limits import ReadBudget
from crewckpt.tui.model import build_history


def _db(store_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(store_dir / "store.db", isolation_level=None)


def _set_parents(store_dir: Path, cid: str, parents: list[str]) -> None:
    with _db(store_dir) as c:
        c.execute("UPDATE commits SET parents=? WHERE id=?", (b"".join(bytes.fromhex(p) for p in parents),
                                                             bytes.fromhex(cid)))


@pytest.fixture
def chain(tmp_path: Path) -> tuple[Path, list[str]]:
    s = Store.init(tmp_path / "s")
    ids = [s.commit({"n": i}) for i in range(3)]
    s.close()
    return tmp_path / "s", ids


def _run(args: list[str], store: Path) -> tuple[int, str, str]:
    from click.testing import CliRunner
    r = CliRunner().invoke(cli, ["--store", str(store), *args])
    return r.exit_code, r.stdout, r.stderr


# -- graph walks: cycles and self-parents --------------------------------------------------------------------

def test_a_self_parent_in_the_index_is_not_followed_and_fsck_names_it(chain: tuple[Path, list[str]]) -> None:
    """Walks follow the commit objects' parents (which cannot loop: an id hashes its parents' ids), so a
    self-parent hand-made into the index row changes no answer; quick fsck names the edge and the row."""
    path, ids = chain
    _set_parents(path, ids[2], [ids[2]])
    with Store.open(path) as s:
        with pytest.raises(UnknownRevision, match="goes past the first checkpoint"):
            s.resolve("main~1000000000")
        assert s.resolve("main~1") == ids[1]
        assert [c.id for c in s.log("main")] == ids[::-1]
        assert s.merge_base("main", ids[0]) == ids[0]
    code, _, err = _run(["rev-parse", "main~1000000000"], path)
    assert code == 1 and err.count("\n") == 1 and "past the first checkpoint" in err
    with Store.open(path) as s:
        problems = s.fsck().problems
    assert f"commit {ids[2]} lists itself as its own parent" in problems
    assert any(ids[2] in p and "disagrees with its commit object (parents)" in p for p in problems)


def test_a_parent_cycle_in_the_index_is_not_followed_and_fsck_names_it(chain: tuple[Path, list[str]]) -> None:
    path, ids = chain
    _set_parents(path, ids[0], [ids[2]])  # in the index, root -> tip: 0 -> 2 -> 1 -> 0
    with Store.open(path) as s:
        assert [c.id for c in s.log("main")] == ids[::-1]
        with pytest.raises(UnknownRevision, match="goes past the first checkpoint"):
            s.resolve("main~5")
        assert s.merge_base("main", "main") == ids[2]
        # the TUI's model (listing rows) treats the looping edge as a missing parent: every path terminates
        hist = build_history(s.list(), s.branches())
        assert all(len(hist.path_to(c)) <= len(ids) for c in ids)
        assert any(ids[0] in p and "parent cycle" in p for p in s.fsck().problems)
    for args in (["log"], ["log", "--graph", "--all"], ["rev-parse", "main~7"]):
        code, _, err = _run(args, path)
        assert code in (0, 1) and err.count("\n") <= 1, (args, err)


def test_the_tui_model_survives_a_self_parent(chain: tuple[Path, list[str]]) -> None:
    path, ids = chain
    _set_parents(path, ids[1], [ids[1]])
    with Store.open(path) as s:
        hist = build_history(s.list(), s.branches())
    assert all(len(hist.path_to(c)) <= len(ids) for c in ids)
    assert ids[1] not in hist.children.get(ids[1], [])


# -- tree expansion and decompression budgets ---------------------------------------------------------------

def _put(s: Store, kind: int, body: bytes) -> bytes:
    o = s.objects.frame(kind, body)
    with s.backend.transaction() as txn:
        txn.put_many([o], 1)
    return o.oid


def _commit_root(s: Store, root: ob.Link, branch: str = "main") -> str:
    c = ob.Commit(root, (), 1, "r", None)
    cid = _put(s, ob.COMMIT, c.encode())
    with s.backend.transaction() as txn:
        txn.index_add(to_row(cid, c, branch, 10_000, {}))
        txn.set_ref_if_equals("refs/heads/" + branch, txn.get_ref("refs/heads/" + branch), cid)
    return cid.hex()


def _fanout_bomb(s: Store, levels: int, width: int = 64) -> str:
    """A tree linking one subtree ``width`` times, ``levels`` deep: width**levels leaves, a few KB stored."""
    oid = _put(s, ob.TREE, ob.encode_tree(ob.ARRAY, ["x" * 100]))
    for _ in range(levels):
        oid = _put(s, ob.TREE, ob.encode_tree(ob.ARRAY, [ob.Link(oid, ob.TREE).ext()] * width))
    return _commit_root(s, ob.Link(oid, ob.TREE))


def test_a_tree_linking_one_subtree_many_times_is_refused_before_expanding(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    cid = _fanout_bomb(s, levels=6)  # 64**6 = 6.9e10 values: unbounded expansion would never finish
    calls: list[int] = []
    real = snapshot._tree_size

    def counting(*a: Any) -> Any:
        calls.append(1)
        return real(*a)

    snapshot._tree_size = counting  # type: ignore[assignment]
    try:
        with pytest.raises(DocumentTooLarge, match="JSON values once expanded") as e:
            s.read(cid)
    finally:
        snapshot._tree_size = real  # type: ignore[assignment]
    assert len(calls) == 7  # one size computation per distinct tree, not per expanded node
    assert "\n" not in str(e.value) and "CKPT_MAX_READ_NODES" in str(e.value)
    small = _fanout_bomb(s, levels=2, width=8)
    assert len(s.read(small)) == 8
    with pytest.raises(DocumentTooLarge):
        s.read(small, max_nodes=50)
    assert s.fsck().ok  # fsck walks distinct objects, never the expansion
    rep = s.fsck(full=True)  # ... and --full names the documents `read` would refuse
    assert [p for p in rep.problems if cid in p and "too large to read" in p]
    code, _, err = _run(["show", cid], tmp_path / "s")
    assert code == 1 and err.count("\n") == 1 and "too large to read" in err


def test_the_read_limits_can_be_raised_by_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = Store.init(tmp_path / "s")
    cid = s.commit(list(range(1000)))
    monkeypatch.setenv("CKPT_MAX_READ_NODES", "100")
    with pytest.raises(DocumentTooLarge):
        s.read(cid)
    monkeypatch.setenv("CKPT_MAX_READ_NODES", "2000")
    assert s.read(cid) == list(range(1000))
    monkeypatch.setenv("CKPT_MAX_READ_NODES", "lots")
    with pytest.raises(DocumentTooLarge, match="not a positive whole number"):
        s.read(cid)


def test_a_small_frame_expanding_to_a_valid_gigabyte_blob_is_refused_without_decompressing(
        tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    body = b"a" * (1 << 30)  # a valid 1 GiB blob: its frame is ~32 KB
    oid = ob.object_id(ob.BLOB, body)
    frame = b"\x01" + zstandard.ZstdCompressor(level=1).compress(body)
    del body
    assert len(frame) < 100_000
    with s.backend.transaction() as txn:
        txn.put_many([StoredObject(oid, ob.BLOB, 1 << 30, frame)], 1)
    cid = _commit_root(s, ob.Link(oid, ob.BLOB))
    with pytest.raises(DocumentTooLarge, match="bytes to decompress"):
        s.read(cid)
    code, _, err = _run(["show", cid], tmp_path / "s")
    assert code == 1 and err.count("\n") == 1 and "too large to read" in err


def test_a_frame_larger_than_its_declared_size_is_corrupt_not_decompressed(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    body = b"b" * 100_000
    oid = ob.object_id(ob.BLOB, body)
    frame = b"\x01" + zstandard.ZstdCompressor().compress(body)
    with s.backend.transaction() as txn:  # the size column lies: gc and budgets trust it for batching
        txn.put_many([StoredObject(oid, ob.BLOB, 10, frame)], 1)
    with pytest.raises(IntegrityError, match="claims 100000 bytes but its size says 10"):
        s.objects.get(oid)
    assert oid.hex() in s.fsck(full=True).broken


def test_the_decompression_budget_is_a_total_not_per_frame(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    blobs = [str(i).encode() * 5000 for i in range(4)]
    ids = [_put(s, ob.BLOB, b) for b in blobs]
    budget = ReadBudget(max_bytes=3 * 5000 + 10)
    with pytest.raises(DocumentTooLarge, match="to decompress"):
        s.objects.blobs(ids, budget=budget)  # each frame is under the limit; their sum is not


def test_a_tree_nested_deeper_than_the_limit_is_refused_at_read(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    oid = _put(s, ob.TREE, ob.encode_tree(ob.ARRAY, []))
    for _ in range(300):  # a link per level: the writer would never make it, a hostile store can
        oid = _put(s, ob.TREE, ob.encode_tree(ob.ARRAY, [ob.Link(oid, ob.TREE).ext()]))
    cid = _commit_root(s, ob.Link(oid, ob.TREE))
    with pytest.raises(DocumentTooLarge, match="nested 301 levels deep"):
        s.read(cid)
    assert any(cid in p and "nested 301 levels deep" in p for p in s.fsck(full=True).problems)
    for args in (["show", cid], ["show", "--raw", cid], ["diff", cid, cid]):
        code, _, err = _run(args, tmp_path / "s")
        assert code == 1 and err.count("\n") == 1 and "Recursion" not in err, (args, err)


# -- names ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["a\u202eb", "a\u200bb", "a\u2066b", "x\x9b31m", "a\ufeffb", "a\u00a0b",
                                 "a\udcffb", "a\u2028b"])
def test_invisible_control_and_bidi_characters_are_refused_in_branch_names(tmp_path: Path, bad: str) -> None:
    s = Store.init(tmp_path / "s")
    with pytest.raises(BadRefName, match=f"U\\+{ord(next(c for c in bad if not c.isalnum())):04X}"):
        s.commit({}, branch=bad)
    assert s.list() == []


def test_an_nfd_branch_name_is_found_by_either_spelling(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    nfd = unicodedata.normalize("NFD", "café")
    cid = s.commit({"a": 1}, branch=nfd)
    assert s.branches() == {"café": cid}
    assert s.resolve(nfd) == s.resolve("café") == cid
    assert s.resolve(nfd + "~0") == cid
    assert [c.id for c in s.list(nfd)] == [cid]


def test_a_lone_surrogate_in_a_revision_is_a_one_line_error(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    s.commit({})
    with pytest.raises(UnknownRevision, match="lone surrogate"):
        s.resolve("ma\udcffin")
    code, _, err = _run(["show", "ma\udcffin"], tmp_path / "s")
    assert code == 1 and err.count("\n") == 1 and "UnicodeEncodeError" not in err
    code, _, err = _run(["branch", "x\udcff"], tmp_path / "s")
    assert code == 2 and "lone surrogate" in err


@pytest.mark.parametrize("verb", [["prune", "--keep", "1"], ["export", "--to", "out"]])
def test_a_bad_branch_option_exits_2_before_resolving(tmp_path: Path, verb: list[str]) -> None:
    Store.init(tmp_path / "s").close()
    code, _, err = _run([*verb, "--branch", "../x"], tmp_path / "s")
    assert code == 2 and "bad branch name" in err and err.count("\n") == 1


def test_prune_older_than_a_400_digit_age_is_a_one_line_usage_error(tmp_path: Path) -> None:
    Store.init(tmp_path / "s").close()
    code, _, err = _run(["prune", "--older-than", "9" * 400 + "d"], tmp_path / "s")
    assert code == 2 and "longer than 10000 years" in err and "Overflow" not in err


def test_writer_stored_ids_do_not_change(tmp_path: Path) -> None:
    """Names are normalized when read or written; stored bytes and ids are not rewritten."""
    s = Store.init(tmp_path / "s")
    cid = s.commit({"k": "v"}, branch="main", time_ns=1, run_id="run-1")
    c = s.objects.commit(bytes.fromhex(cid))
    assert ob.object_id(ob.COMMIT, c.encode()).hex() == cid
    assert msgpack.unpackb(c.encode())[4] == "run-1"  # format 2: [2, tree, parents, time_ns, run_id, ...]


def test_every_hostile_store_failure_is_a_ckpt_error(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    cid = _fanout_bomb(s, levels=5)
    for call in (lambda: s.read(cid), lambda: s.resolve("\udcff")):
        with pytest.raises(CkptError):
            call()


# -- open and write errors are named, never "corrupt" ---------------------------------------------------------

@pytest.mark.parametrize("message, expect", [
    ("database or disk is full", "disk full"),
    ("disk I/O error", "I/O error"),
    ("unable to open database file", "no permission, or a read-only filesystem"),
    ("attempt to write a readonly database", "no permission, or a read-only filesystem"),
])
def test_open_errors_are_named_with_their_fix_not_as_corruption(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                message: str, expect: str) -> None:
    from crewckpt.backends import sqlite as backend_module
    from crewckpt.backends.base import StoreWriteError
    Store.init(tmp_path / "s").close()
    real = sqlite3.connect

    class Failing:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self._c = conn

        def execute(self, sql: str, *a: Any) -> Any:
            if sql.startswith("PRAGMA journal_mode"):
                raise sqlite3.OperationalError(message)
            return self._c.execute(sql, *a)

        def close(self) -> None:
            self._c.close()

    monkeypatch.setattr(backend_module.sqlite3, "connect", lambda *a, **k: Failing(real(*a, **k)))
    with pytest.raises(StoreWriteError, match=expect) as e:
        Store.open(tmp_path / "s")
    assert "restore it from a backup" not in str(e.value) and "not damaged" in str(e.value)
    monkeypatch.setattr(backend_module.sqlite3, "connect", real)
    Store.open(tmp_path / "s").close()  # nothing was damaged


def test_a_hard_linked_store_db_opens_read_only_and_refuses_writes(tmp_path: Path) -> None:
    from crewckpt.backends.base import StoreWriteError
    s = Store.init(tmp_path / "a")
    cid = s.commit({"x": 1})
    s.close()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "store.db").hardlink_to(tmp_path / "a" / "store.db")  # what `cp -al a b` makes
    for folder in ("a", "b"):
        with Store.open(tmp_path / folder) as t:
            assert t.read(cid) == {"x": 1}
            with pytest.raises(StoreWriteError, match="2 hard links") as e:
                t.commit({"x": 2})
            assert "\n" not in str(e.value) and "cp store.db store.db.new" in str(e.value)
    code, _, err = _run(["gc"], tmp_path / "b")
    assert code == 1 and "hard links" in err
    (tmp_path / "b" / "store.db").unlink()
    with Store.open(tmp_path / "a") as t:  # one name again: writable
        t.commit({"x": 3})


# -- fsck sees what hashes cannot ------------------------------------------------------------------------------

def test_fsck_runs_sqlites_own_check(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    for i in range(50):
        s.commit({"n": i, "pad": "x" * 50})
    s.close()
    with _db(tmp_path / "s") as c:  # an index whose entries no longer match its table: every row reads fine
        c.execute("PRAGMA writable_schema=ON")
        c.execute("UPDATE sqlite_master SET sql='CREATE INDEX commits_seq ON commits(time_ns)' "
                  "WHERE name='commits_seq'")
        c.execute("PRAGMA writable_schema=OFF")
    with Store.open(tmp_path / "s") as t:
        rep = t.fsck(full=True)
    assert not rep.ok and any(p.startswith("SQLite integrity_check") for p in rep.problems), rep.problems
    db = str(tmp_path / "s" / "store.db")
    assert all(f"sqlite3 {db} .recover" in p for p in rep.problems if p.startswith("SQLite")), rep.problems


def test_fsck_advice_on_a_damaged_store_fits_its_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Store.init("memory:fsck-advice")
    s.commit({"x": 1})

    def damaged() -> Any:
        raise CorruptStore("memory:fsck-advice: the commit index is unreadable")

    monkeypatch.setattr(s.backend, "index_rows", damaged)
    rep = s.fsck()
    assert len(rep.problems) == 1 and "the commit index is unreadable" in rep.problems[0], rep.problems
    assert "restore the store from a backup" in rep.problems[0] and "store.db" not in rep.problems[0]


def _hand_tree(s: Store, payload: Any, form: int = ob.ARRAY) -> bytes:
    return _put(s, ob.TREE, ob.encode_tree(form, payload))


def test_fsck_full_reports_links_refs_and_chunk_lists_of_the_wrong_kind(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    blob = _put(s, ob.BLOB, b"a blob, not a tree" * 600)
    bad_utf8 = _put(s, ob.BLOB, b"\xff\xfe not utf-8" * 1000)
    inner = _hand_tree(s, [1, 2])
    obj_leaf = _hand_tree(s, {"k": 1}, ob.OBJECT)
    first = s.commit({"ok": True})
    commit_as_tree = bytes.fromhex(first)
    cids = {
        "tree link to a blob": _commit_root(s, ob.Link(_hand_tree(s, [ob.Link(blob, ob.TREE).ext()]), ob.TREE), "a"),
        "tree link to a commit": _commit_root(s, ob.Link(_hand_tree(s, [ob.Link(commit_as_tree, ob.TREE).ext()]),
                                                         ob.TREE), "b"),
        "string link to a tree": _commit_root(s, ob.Link(_hand_tree(s, [ob.Link(inner, ob.BLOB).ext()]), ob.TREE),
                                              "c"),
        "array chunks holding an object": _commit_root(s, ob.Link(_hand_tree(
            s, [ob.Link(inner, ob.TREE).ext(), ob.Link(obj_leaf, ob.TREE).ext()], ob.ARRAY_CHUNKS), ob.TREE), "d"),
        "non-UTF-8 string": _commit_root(s, ob.Link(_hand_tree(s, [ob.Link(bad_utf8, ob.BLOB).ext()]), ob.TREE),
                                         "e"),
    }
    with s.backend.transaction() as txn:
        txn.set_ref_if_equals("refs/heads/tree-ref", None, inner)
    quick = s.fsck()  # compares each object's stored kind with its link; forms and blob bytes are for full
    assert not quick.ok
    why = "\n".join(quick.broken.values())
    for wrong in (f"links {blob.hex()} as a tree, but it is a blob", f"links {inner.hex()} as a blob, but it is a tree",
                  f"links {commit_as_tree.hex()} as a tree, but it is a commit"):
        assert wrong in why, quick.broken
    named = {cids[k] for k in ("tree link to a blob", "tree link to a commit", "string link to a tree")}
    assert named <= set(quick.affected_commits) and first not in quick.affected_commits
    rep = s.fsck(full=True)
    text = "\n".join(rep.problems)
    assert "ref refs/heads/tree-ref names" in text and "a tree, not a commit" in text
    assert f"links {blob.hex()} as a tree, but it is a blob" in text
    assert f"links {commit_as_tree.hex()} as a tree, but it is a commit" in text
    assert f"links {inner.hex()} as a blob, but it is a tree" in text
    assert f"holds {obj_leaf.hex()} of form 0" in text
    assert bad_utf8.hex() in text and "not UTF-8" in text
    assert s.fsck(full=True).problems == rep.problems  # deterministic
    for cid in cids.values():
        with pytest.raises(CkptError):
            s.read(cid)


# -- damaged rows: one line, or read from the authoritative object ---------------------------------------------

def test_a_frame_stored_as_text_reads_as_its_bytes(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    cid = s.commit({"k": "v" * 100})
    tree = s.objects.commit(bytes.fromhex(cid)).tree.oid
    s.close()
    with _db(tmp_path / "s") as c:
        c.execute("UPDATE objects SET frame=CAST(frame AS TEXT) WHERE oid=?", (tree,))
        assert c.execute("SELECT typeof(frame) FROM objects WHERE oid=?", (tree,)).fetchone()[0] == "text"
    with Store.open(tmp_path / "s") as t:  # the bytes are intact: read as a BLOB they verify
        assert t.read(cid) == {"k": "v" * 100}
        assert t.fsck(full=True).ok
    for verb in (["stats"], ["list"], ["log"], ["gc", "--dry-run"], ["show", cid]):
        code, _, err = _run(verb, tmp_path / "s")
        assert code == 0 and err == "", (verb, err)


@pytest.mark.parametrize("column, value", [("summary", b"\xc1garbage"), ("summary", "text, not msgpack"),
                                           ("meta", "{not json"), ("parents", "short")])
def test_a_damaged_index_row_is_read_from_its_commit_object(tmp_path: Path, column: str, value: Any) -> None:
    s = Store.init(tmp_path / "s")
    ids = [s.commit({"n": i}, meta={"m": i}) for i in range(3)]
    s.close()
    with _db(tmp_path / "s") as c:
        c.execute(f"UPDATE commits SET {column}=? WHERE id=?", (value, bytes.fromhex(ids[1])))
    with Store.open(tmp_path / "s") as t:
        assert sorted(c.id for c in t.list()) == sorted(ids)
        assert t.info(ids[1]).meta == {"m": 1}
        assert t.stats()["commits"] == 3
    for verb in (["stats"], ["list"], ["log"], ["gc"]):
        code, _, err = _run(verb, tmp_path / "s")
        assert code == 0 and err == "", (verb, err)


def test_a_damaged_row_whose_object_is_gone_fails_in_one_line(tmp_path: Path) -> None:
    s = Store.init(tmp_path / "s")
    ids = [s.commit({"n": i}) for i in range(2)]
    s.close()
    with _db(tmp_path / "s") as c:
        c.execute("UPDATE commits SET meta='{bad' WHERE id=?", (bytes.fromhex(ids[0]),))
        c.execute("DELETE FROM objects WHERE oid=?", (bytes.fromhex(ids[0]),))
    for verb in (["list"], ["log"], ["stats"]):
        code, _, err = _run(verb, tmp_path / "s")
        assert code == 1 and err.count("\n") == 1 and "commit-index row" in err and "JSONDecodeError" not in err


@pytest.mark.parametrize("key, value", [("gc_epoch", "banana"), ("dictionary", "zz-not-hex"),
                                        ("counter:seq", "oops")])
def test_damaged_meta_rows_do_not_stop_the_store(tmp_path: Path, key: str, value: str) -> None:
    s = Store.init(tmp_path / "s")
    first = s.commit({"n": 0})
    s.close()
    with _db(tmp_path / "s") as c:
        c.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))
    with Store.open(tmp_path / "s") as t:
        second = t.commit({"n": 1})
        assert [c.id for c in t.log()] == [second, first]  # seq never goes back: no false cycle
        t.gc()
        assert t.read(first) == {"n": 0}


def test_gc_batches_by_declared_size(tmp_path: Path) -> None:
    from crewckpt.history.gc import size_batches
    ids = [bytes([i]) * 32 for i in range(10)]
    sizes = {o: 600 << 20 for o in ids[:3]} | {o: 10 for o in ids[3:]}
    batches = size_batches(ids, sizes, limit=64 << 20)
    assert [len(b) for b in batches] == [1, 1, 1, 7]
    assert size_batches(ids, None, count=4) == [ids[:4], ids[4:8], ids[8:]]


def test_a_permission_error_at_write_is_named_not_corrupt(tmp_path: Path) -> None:
    from crewckpt.backends.base import StoreWriteError
    s = Store.init(tmp_path / "s")
    err = s.backend._error(sqlite3.OperationalError("unable to open database file"))  # type: ignore[attr-defined]
    assert isinstance(err, StoreWriteError) and "permissions" in str(err)
    s.close()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.lists(st.integers(0, 5), max_size=3), st.integers(-2, 8)), min_size=1, max_size=6),
       st.integers(0, 12))
def test_any_hand_made_commit_graph_gives_answers_or_one_line_errors(edges: list[tuple[list[int], int]],
                                                                     steps: int) -> None:
    """Fuzz: commit-index rows with arbitrary parents and seqs (cycles, self-parents, dangling ids, ties);
    every walk terminates with a result or a CkptError, and fsck never raises."""
    import dataclasses
    s = Store.memory()
    ids = [bytes.fromhex(s.commit({"n": i}, branch="main")) for i in range(len(edges))]
    with s.backend.transaction() as txn:
        for cid, (parents, seq) in zip(ids, edges):
            row = txn.index_get(cid)
            assert row is not None
            txn.index_remove([cid])
            ps = tuple(ids[p] if p < len(ids) else bytes([p]) * 32 for p in parents)
            txn.index_add(dataclasses.replace(row, parents=ps, seq=seq))
    for call in (lambda: list(s.log("main")), lambda: s.resolve(f"main~{steps}"), lambda: s.resolve("main^2"),
                 lambda: s.merge_base("main", ids[0].hex())):
        try:
            call()
        except CkptError as e:
            assert "\n" not in str(e)
    hist = build_history(s.list(), s.branches())
    assert all(len(hist.path_to(c.hex())) <= len(ids) for c in ids)
    s.fsck()
    s.fsck(full=True)


def test_an_object_answered_under_another_id_is_refused() -> None:
    """A backend answering a request for X with object Y (a valid object, verified on its own id) must not
    pass Y off as X: every read checks the id it asked for."""
    import dataclasses

    from crewckpt import Store
    from crewckpt.errors import IntegrityError
    from crewckpt.history.objectdb import ObjectDB

    store = Store.memory()
    a = store.commit({"a": "x" * 9000}, branch="main")
    b = store.commit({"b": "y" * 9000}, branch="main")
    backend = store.backend
    tree_a, tree_b = (backend.index_get(bytes.fromhex(c)).tree for c in (a, b))

    class Swapping:
        def get_many(self, oids: Any) -> dict[bytes, Any]:
            real = backend.get_many([tree_b])
            return {o: dataclasses.replace(real[tree_b]) for o in oids}

    with pytest.raises(IntegrityError, match="answered with object"):
        ObjectDB(backend).get_many([tree_a], reader=Swapping())  # type: ignore[arg-type]


# -- fsck and gc under the read limit (attacker pass) ----------------------------------------------------------

def _bomb_tree(s: Store, mib: int) -> tuple[bytes, str]:
    """A commit whose root tree's frame is ~32 KB of zstd zeros declaring ``mib`` MiB (its id is made up)."""
    n = mib << 20
    frame = b"\x01" + zstandard.ZstdCompressor(level=1).compress(b"\x00" * n)
    oid = ob.object_id(ob.TREE, b"not the body")
    with s.backend.transaction() as txn:
        txn.put_many([StoredObject(oid, ob.TREE, n, frame)], 1)
    return oid, _commit_root(s, ob.Link(oid, ob.TREE))


def test_fsck_and_gc_refuse_an_object_over_the_read_limit_without_inflating_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = Store.init(tmp_path / "s")
    s.commit({"keep": 1})
    oid, _ = _bomb_tree(s, 40)
    monkeypatch.setenv("CKPT_MAX_READ_BYTES", str(10 << 20))  # the 40 MiB tree is over it: never decompressed
    calls: list[int] = []
    real = s.objects.codec.decode

    def counting(frame: bytes, size: int | None = None) -> bytes:
        calls.append(size or 0)
        return real(frame, size)

    monkeypatch.setattr(s.objects.codec, "decode", counting)
    for full in (False, True):
        rep = s.fsck(full=full)
        lines = [p for p in rep.problems if oid.hex() in p]
        assert len(lines) == 1 and f"declares {40 << 20} bytes, more than the read limit" in lines[0], rep.problems
        assert "CKPT_MAX_READ_BYTES" in lines[0] and oid.hex() not in rep.broken
    before = s.stats()["objects"]
    for dry in (True, False):
        with pytest.raises(GcAborted, match=f"{oid.hex()} declares .* nothing|deleting anything.*{oid.hex()}"):
            s.gc(dry_run=dry)
    assert max(calls) < 1 << 20, calls  # nothing near the declared size was inflated
    assert s.stats()["objects"] == before  # G2: a failed read deletes nothing
    s.close()
    for args in (["fsck"], ["fsck", "--full"], ["gc", "-n"], ["gc"]):
        code, out, err = _run(args, tmp_path / "s")
        assert code == 1 and (out + err).count("declares") == 1, (args, out, err)


def _damage(path: Path, sql: str, *args: Any) -> None:
    with _db(path) as c:
        c.execute(sql, args)


@pytest.mark.parametrize("case", ["ref at a tree", "2-byte ref"])
def test_fsck_and_reads_name_a_ref_that_cannot_name_a_commit(chain: tuple[Path, list[str]], case: str) -> None:
    path, ids = chain
    with Store.open(path) as s:
        tree = s.objects.commit(bytes.fromhex(ids[0])).tree.oid
    target = tree if case == "ref at a tree" else b"\x01\x02"
    _damage(path, "UPDATE refs SET target=? WHERE name='refs/heads/main'", target)
    want = "a tree, not a commit" if case == "ref at a tree" else "is malformed: it holds 2 byte(s) (0102)"
    with Store.open(path) as s:
        for full in (False, True):
            lines = [p for p in s.fsck(full=full).problems if "refs/heads/main" in p]
            assert len(lines) == 1 and want in lines[0] and "ckpt reflog main" in lines[0], (full, lines)
    for args in (["log"], ["show", "main"], ["rev-parse", "main~1"]):
        code, _, err = _run(args, path)
        assert code == 1 and err.count("\n") == 1 and "ref refs/heads/main" in err and want in err, (args, err)
        assert "pruned" not in err and "corrupt" not in err
    if case == "ref at a tree":  # gc keeps what a ref names: it stops, naming the ref, deleting nothing
        for args in (["gc", "-n"], ["gc"]):
            code, _, err = _run(args, path)
            assert code == 1 and err.count("\n") == 1 and "ref refs/heads/main names" in err and want in err, err
        with Store.open(path) as s:
            assert s.read(ids[0]) == {"n": 0}


@pytest.mark.parametrize("column, value, want", [
    ("seq", "abc", "its seq 'abc' is not a whole number"),
    ("parents", b"\x01\x02", "malformed parent id 0102"),
    ("branch", "../../x", "its branch '../../x' is not a valid branch name"),
])
def test_fsck_names_a_damaged_index_row_and_reads_say_so(chain: tuple[Path, list[str]], column: str, value: Any,
                                                         want: str) -> None:
    path, ids = chain
    _damage(path, f"UPDATE commits SET {column}=? WHERE id=?", value, bytes.fromhex(ids[1]))
    with Store.open(path) as s:
        for full in (False, True):
            rep = s.fsck(full=full)
            assert len(rep.problems) == 1 and ids[1] in rep.problems[0] and want in rep.problems[0], rep.problems
            assert "--rebuild-index" in rep.problems[0]
        assert all("../" not in c.branch for c in s.list())  # a path-like branch is never shown as one
        if column == "seq":  # walks need the order: one line naming the row, not a "parent cycle"
            for walk in (lambda: list(s.log()), lambda: s.resolve("main~2")):
                with pytest.raises(CkptError, match="commit-index row .* is damaged: its seq") as e:
                    walk()
                assert "cycle" not in str(e.value) and "--rebuild-index" in str(e.value)
        else:  # the object still answers for the row's copies
            assert [c.id for c in s.log()] == ids[::-1]
            assert s.resolve("main~2") == ids[0]
    code, _, err = _run(["fsck", "--rebuild-index"], path)
    assert code == 0, err
    with Store.open(path) as s:
        assert s.fsck(full=True).ok
        assert [c.id for c in s.log()] == ids[::-1]


# -- the commit index is an unhashed cache: consequences come from the verified commit objects ---------------

@pytest.fixture
def v123(tmp_path: Path) -> tuple[Path, list[str]]:
    """The attacker's setup: three commits {"v": 1..3} on main of a SQLite store."""
    s = Store.init(tmp_path / "t")
    ids = [s.commit({"v": i}) for i in (1, 2, 3)]
    s.close()
    return tmp_path / "t", ids


class TestTamperedIndexRow:
    def test_revisions_read_and_walks_follow_the_commit_object_not_the_row(self, v123: tuple[Path, list[str]]
                                                                          ) -> None:
        path, ids = v123
        with _db(path) as c:  # exactly the attack: the tip's row claims seq 1 is its parent
            c.execute("update commits set parents=? where id=?", (bytes.fromhex(ids[0]), bytes.fromhex(ids[2])))
        code, out, _ = _run(["show", "main~1"], path)
        assert code == 0 and '"v": 2' in out and '"v": 1' not in out, out
        with Store.open(path) as s:
            assert s.read("main~1") == {"v": 2}
            assert s.resolve("main~1") == s.resolve("main^") == s.resolve("main^1") == ids[1]
            assert s.resolve("main~2") == ids[0]
            assert [c.id for c in s.log("main")] == ids[::-1]
            assert s.info("main").parents == (ids[1],)
            assert s.merge_base("main", ids[1]) == ids[1]

    def test_info_and_resume_take_meta_from_the_commit_object(self, v123: tuple[Path, list[str]]) -> None:
        path, ids = v123
        with _db(path) as c:
            c.execute("""update commits set meta='{"flow_class":"evilmod.Evil"}' where seq=3""")
        with Store.open(path) as s:
            for rev in ("main", ids[2], ids[2][:12], "HEAD"):  # every resolution path, a full id included
                assert s.info(rev).meta == {}, rev
                assert s.info(rev).seq == 3 and s.info(rev).branch == "main"  # the index's own fields stay
        code, out, err = _run(["info", "main"], path)
        assert code == 0 and "evilmod" not in out + err

    @pytest.mark.parametrize("column, value, field", [
        ("parents", None, "parents"), ("meta", '{"flow_class": "evilmod.Evil"}', "meta"),
        ("time_ns", 7, "time"), ("run_id", "run-evil", "run"), ("trig", "evil", "trigger"),
        ("alias", "20261129T234227_0d859366", "alias"), ("tree", None, "tree")])
    def test_every_copied_field_comes_from_the_object_and_quick_fsck_names_the_commit(
            self, v123: tuple[Path, list[str]], column: str, value: Any, field: str) -> None:
        path, ids = v123
        with Store.open(path) as s:
            before = s.info(ids[2])
            other_tree = bytes.fromhex(s.info(ids[0]).tree)
        with _db(path) as c:
            v = {"parents": bytes.fromhex(ids[0]), "tree": other_tree}.get(column, value)
            c.execute(f"update commits set {column}=? where id=?", (v, bytes.fromhex(ids[2])))
        with Store.open(path) as s:
            assert s.info(ids[2]) == before
            assert s.read("main") == {"v": 3}
            for full in (False, True):
                rep = s.fsck(full=full)
                assert not rep.ok and rep.affected_commits == [ids[2]], rep
                assert rep.stale_rows == {ids[2]: f"disagrees with its commit object ({field})"}
                assert len(rep.problems) == 1 and ids[2] in rep.problems[0] and "--rebuild-index" in rep.problems[0]
        for args in (["fsck"], ["fsck", "--full"]):
            code, out, _ = _run(args, path)
            assert code == 1 and f"1 problem(s); affected commits: 1 ({ids[2][:12]})" in out, out
        code, _, err = _run(["fsck", "--rebuild-index"], path)
        assert code == 0, err
        with Store.open(path) as s:
            assert s.fsck().ok and s.info(ids[2]) == before

    def test_a_disagreeing_row_is_logged_once_per_handle(self, v123: tuple[Path, list[str]],
                                                         caplog: pytest.LogCaptureFixture) -> None:
        path, ids = v123
        with _db(path) as c:
            c.execute("update commits set run_id='x' where id=?", (bytes.fromhex(ids[1]),))
        with Store.open(path) as s:
            for _ in range(3):
                assert [c.id for c in s.log()] == ids[::-1]
        hits = [r.getMessage() for r in caplog.records if "disagrees" in r.getMessage()]
        assert len(hits) == 1 and ids[1] in hits[0] and "(run)" in hits[0] and "--rebuild-index" in hits[0]

    def test_an_alias_row_naming_another_commit_is_refused_and_rebuilt(self, tmp_path: Path) -> None:
        s = Store.init(tmp_path / "t")
        ids = [s.commit({"v": i}, alias=f"20261129T23422{i}_0d85936{i}") for i in (1, 2, 3)]
        s.close()
        with _db(tmp_path / "t") as c:  # resume <checkpoint id of v3> would start from v1
            c.execute("update aliases set id=? where alias=?", (bytes.fromhex(ids[0]), "20261129T234223_0d859363"))
        with Store.open(tmp_path / "t") as s:
            for call in (lambda: s.resolve("20261129T234223_0d859363"), lambda: s.read("20261129T234223_0d859363"),
                         lambda: s.lookup_alias("20261129T234223_0d859363")):
                with pytest.raises(UnknownRevision, match=f"alias table names commit {ids[0]}.*--rebuild-index"):
                    call()
            assert s.resolve("20261129T234221_0d859361") == ids[0]
        code, _, err = _run(["show", "20261129T234223_0d859363"], tmp_path / "t")
        assert code == 1 and err.count("\n") == 1 and "alias table is damaged" in err
        code, _, err = _run(["fsck", "--rebuild-index"], tmp_path / "t")
        assert code == 0, err
        with Store.open(tmp_path / "t") as s:
            assert [s.resolve(f"20261129T23422{i}_0d85936{i}") for i in (1, 2, 3)] == ids



def test_ancestry_between_stores_follows_the_commit_objects_not_forged_rows(tmp_path: Path) -> None:
    """sync.is_ancestor decides fast-forward or not for fetch, push, pull and publish, on either store: a
    row claiming an unrelated parent must not make a commit a descendant (nor hide its real parent)."""
    from crewckpt.history.remotes import side
    from crewckpt.history.sync import is_ancestor
    with Store.init(tmp_path / "t") as s:
        other = s.commit({"other": 1}, branch="b")
        ids = [s.commit({"v": i}, branch="main") for i in (1, 2, 3)]
    _set_parents(tmp_path / "t", ids[2], [other])
    with Store.open(tmp_path / "t") as s:
        g = side(s, "t")
        assert not is_ancestor(g, bytes.fromhex(other), bytes.fromhex(ids[2]))
        assert is_ancestor(g, bytes.fromhex(ids[0]), bytes.fromhex(ids[2]))


@pytest.mark.parametrize(("meta", "error", "words"), [
    ({"x": float("nan")}, ValueError, "meta holds nan"),
    ({"x": [1, {"y": float("inf")}]}, ValueError, "meta holds inf"),
    ({"x": 10**30}, TypeError, "meta is not JSON"),
    ({"x": "\ud800"}, TypeError, "meta is not JSON"),
    ({1: "a"}, TypeError, "meta is not JSON"),
    ({"u": uuid.UUID(int=7)}, TypeError, "meta holds a value of type UUID"),  # orjson wrote a string
    ({"d": [datetime.date(2026, 12, 7)]}, TypeError, "meta holds a value of type date"),
    ("s", TypeError, "meta must be a dict"),
    ([("a", 1)], TypeError, "meta must be a dict"),
])
def test_commit_metadata_that_is_not_json_is_refused_in_one_line_naming_meta(
        tmp_path: Path, meta: Any, error: type[Exception], words: str) -> None:
    # before: NaN was stored as null, 10**30 raised orjson's bare "Integer exceeds 64-bit range", "s" became
    # {"value": "s"}
    s = Store.init(tmp_path / "s")
    first = s.commit({"a": 1})
    with pytest.raises(error) as info:
        s.commit({"a": 2}, meta=meta)
    assert words in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert [c.id for c in s.log()] == [first]  # nothing written
    ok = s.commit({"a": 3}, meta={"x": None, "y": [1.5, "nullable"], "z": {}})
    assert s.info(ok).meta == {"x": None, "y": [1.5, "nullable"], "z": {}}


def test_a_short_id_names_a_pruned_commit_as_its_full_id_does_until_gc(tmp_path: Path) -> None:
    # before: `ckpt show <full id>` read a pruned commit, `ckpt show <short id>` said "unknown revision"
    s = Store.init(tmp_path / "s")
    ids = [s.commit({"step": i}, branch="main") for i in range(3)]
    s.prune("main", keep=1)
    old = ids[0]
    assert s.resolve(old) == old
    assert s.resolve(old[:10]) == old and s.resolve(old[:7].upper()) == old
    assert s.read(old[:10]) == {"step": 0}
    s.gc()
    with pytest.raises(UnknownRevision, match="unknown revision"):
        s.resolve(old[:10])
