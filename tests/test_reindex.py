"""`ckpt fsck --rebuild-index`: the commit index is a derived cache, rebuilt from objects, refs and reflogs
(issue 14 item 3; docs/backends.md 'Commit index')."""

from __future__ import annotations

import dataclasses

import orjson
import pytest
from cli_helpers import DemoStore, build_demo_store, ckpt, ok

from crewckpt.history.store import Store
from crewckpt.views.document import CREWAI


@pytest.fixture
def demo(tmp_path) -> DemoStore:
    return build_demo_store(tmp_path / ".ckpt")


def _listing(path: str) -> list[tuple[str, str, str | None, dict]]:
    with Store.open(path) as s:
        return [(c.id, c.branch, c.alias, c.to_json()["summary"]) for c in s.list()]


def test_rebuild_index_after_every_row_and_alias_was_lost(demo):
    before = _listing(demo.path)
    with Store.open(demo.path) as s:
        with s.backend.transaction() as t:
            ids = [r.id for r in t.index_rows()]
            assert t.index_remove(ids) == 6
            t.alias_forget(ids)
        assert s.list() == [] and s.lookup_alias(before[0][2]) is None
    out = ok(ckpt(demo.path, "fsck", "--rebuild-index")).stdout
    assert "index rebuilt: 6 live checkpoint(s); 6 added" in out and "fsck: checked" in out
    assert _listing(demo.path) == before  # same commits, order, branches, aliases and summaries
    with Store.open(demo.path) as s:
        assert s.lookup_alias(before[0][2]) == before[0][0]
        assert [c.id for c in s.log(demo.alt[-1])][-2:] == [demo.main[1], demo.main[0]]
        assert s.fsck(full=True).ok


def test_rebuild_puts_a_restored_parent_before_its_children(demo):
    """A lost row in the middle of a chain comes back older than its children (walks refuse a parent
    that is not older), and the other rows keep their order."""
    before = _listing(demo.path)
    with Store.open(demo.path, profile=CREWAI) as s:  # a recomputed summary is the profile's (as `ckpt fsck`)
        with s.backend.transaction() as t:
            assert t.index_remove([bytes.fromhex(demo.main[1])]) == 1  # the fork point
        rep = s.rebuild_index()
        assert (rep.added, rep.dropped, rep.rows) == (1, 0, 6)
        seq = {c.id: c.seq for c in s.list()}
        assert seq[demo.main[0]] < seq[demo.main[1]] < min(seq[demo.main[2]], seq[demo.alt[0]])
        assert s.fsck(full=True).ok
    assert _listing(demo.path) == before


def test_rebuild_corrects_a_damaged_row_and_drops_a_row_without_object(demo):
    with Store.open(demo.path) as s:
        cid = bytes.fromhex(demo.main[2])
        with s.backend.transaction() as t:
            row = t.index_get(cid)
            assert row is not None
            t.index_remove([cid])
            t.index_add(dataclasses.replace(row, run_id="forged", trigger="nope"))
            t.index_add(dataclasses.replace(row, id=b"\x07" * 32))  # a row whose commit does not exist
        assert not s.fsck(full=True).ok
        dry = s.rebuild_index(dry_run=True)
        assert (dry.rewritten, dry.dropped) == (1, 1)
        row = s.backend.index_get(cid)
        assert row is not None and row.run_id == "forged"  # a dry run changes nothing
        assert s.info(demo.main[2]).run_id != "forged"  # info takes the commit object's fields
        rep = s.rebuild_index()
        assert (rep.rewritten, rep.dropped, rep.added) == (1, 1, 0)
        assert s.info(demo.main[2]).run_id != "forged" and s.fsck(full=True).ok


def test_rebuild_index_json_and_a_second_run_changes_nothing(demo):
    rec = orjson.loads(ok(ckpt(demo.path, "fsck", "--rebuild-index", "--json")).stdout)
    assert rec["ok"] and rec["rebuild_index"] == {"rows": 6, "added": 0, "dropped": 0, "rewritten": 0,
                                                  "renumbered": 0, "aliases": 0, "problems": []}


def test_pruned_commits_come_back_live_on_the_branch_they_were_written_on(tmp_path):
    with Store.init(tmp_path / "s") as s:
        ids = [s.commit({"n": i}) for i in range(4)]
        assert s.prune("main", keep=1) == ids[:3]
        s.create_branch("old", ids[0])
        with s.backend.transaction() as t:
            t.index_remove([r.id for r in t.index_rows()])
        s.rebuild_index()
        # pruned commits reachable through parents come back live: a rebuild never loses anything; the
        # branch is the one whose reflog says it was written there, not the later branch made at it
        assert [(c.id, c.branch) for c in s.list()] == [(i, "main") for i in ids]
        assert s.fsck().ok


def test_a_damaged_commit_keeps_its_row_so_gc_never_collects_it(tmp_path):
    """A flipped bit in a commit object: the rebuild reports it and keeps its row (dropping it made gc delete
    the commit and its intact snapshot: one bit turned into permanent loss); gc then refuses, nothing goes."""
    import sqlite3

    from crewckpt.errors import CkptError

    path = tmp_path / "s"
    store = Store.init(path)
    first = store.commit({"step": 1, "pad": "a" * 500})
    middle = store.commit({"step": 2, "pad": "b" * 500})
    store.commit({"step": 3, "pad": "c" * 500})
    tree = store.info(middle).tree
    store.close()
    db = sqlite3.connect(path / "store.db")
    (frame,) = db.execute("SELECT frame FROM objects WHERE oid = ?", (bytes.fromhex(middle),)).fetchone()
    db.execute("UPDATE objects SET frame = ? WHERE oid = ?",
               (frame[:-1] + bytes([frame[-1] ^ 0x01]), bytes.fromhex(middle)))
    db.commit()
    db.close()
    store = Store.open(path)
    report = store.rebuild_index()
    assert report.dropped == 0 and any(middle in p for p in report.problems)
    assert {c.id for c in store.list()} >= {first, middle}
    with pytest.raises(CkptError):
        store.gc()
    store.close()
    db = sqlite3.connect(path / "store.db")
    present = {bytes(r[0]).hex() for r in db.execute("SELECT oid FROM objects")}
    db.close()
    assert middle in present and tree in present
    bad = ckpt(str(path), "fsck")
    assert bad.exit_code == 1 and middle in bad.stdout
