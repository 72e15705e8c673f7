"""Duplicate parents. The rule (as git's commit-tree, "duplicate parent X ignored"): a writer lists each parent
once, in first-seen order, whatever names the caller used for it; a reader still reads a commit object that lists
one twice (written by another store), and fsck names it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from cli_helpers import ckpt

from crewckpt import Store
from crewckpt.format import objects as ob
from crewckpt.history.commits import to_row


def test_a_commit_lists_each_parent_once_in_first_seen_order(caplog: pytest.LogCaptureFixture) -> None:
    s = Store.memory()
    a = s.commit({"n": 1}, branch="main")
    b = s.commit({"n": 2}, branch="side", parents=[])
    with caplog.at_level(logging.WARNING, logger="crewckpt"):
        m = s.commit({"n": 3}, branch="main", parents=[a, b, "main", a[:10], b])  # main is a: five names, two commits
    assert s.info(m).parents == (a, b)
    assert s.objects.commit(bytes.fromhex(m)).parents == (bytes.fromhex(a), bytes.fromhex(b))
    warned = [r.getMessage() for r in caplog.records if "duplicate parent" in r.getMessage()]
    assert warned == [f"crewckpt: duplicate parent {a} ignored", f"crewckpt: duplicate parent {b} ignored"]
    # the same commit whichever way the duplicates were spelled: one id
    again = Store.memory()
    a2 = again.commit({"n": 1}, branch="main", run_id="r", time_ns=1)
    one = again.commit({"n": 9}, branch="x", parents=[a2, a2], run_id="r", time_ns=2)
    assert one == again.commit({"n": 9}, branch="y", parents=[a2], run_id="r", time_ns=2)
    assert again.info(one).parents == (a2,)


def _foreign_store_with_a_duplicate_parent(path: Path) -> tuple[Store, str, str]:
    """A store another writer filled: its main tip's commit object lists its parent twice."""
    s = Store.init(path)
    base = s.commit({"n": 1}, branch="main")
    tree = ob.Link(bytes.fromhex(s.info(base).tree), ob.TREE)
    c = ob.Commit(tree, (bytes.fromhex(base),) * 2, 2, "r", None)
    o = s.objects.frame(ob.COMMIT, c.encode())
    with s.backend.transaction() as txn:
        txn.put_many([o], 1)
        txn.index_add(to_row(o.oid, c, "main", txn.counter_next("seq"), {}))
        txn.set_ref_if_equals("refs/heads/main", bytes.fromhex(base), o.oid)
    return s, base, o.oid.hex()


def test_a_commit_object_listing_a_parent_twice_is_read_and_fsck_names_it(tmp_path: Path) -> None:
    there, base, dup = _foreign_store_with_a_duplicate_parent(tmp_path / "there")
    here = Store.init(tmp_path / "here")
    here.fetch(there)  # a reader accepts it: its id hashes both copies, nothing may change it
    there.close()
    assert here.info("origin/main").id == dup
    assert here.info(dup).parents == (base, base) and here.read(dup) == {"n": 1}
    assert [c.id for c in here.log("origin/main")] == [dup, base]
    report = here.fsck()
    want = (f"commit {dup} lists parent {base} twice (written by another store; readers follow it once, and "
            f"its id keeps both: nothing to repair)")
    assert want in report.problems and not report.ok
    here.close()
    out = ckpt(str(tmp_path / "here"), "fsck", "--json")
    assert out.exit_code == 1 and want in json.loads(out.stdout)["problems"]
