"""Local order after a revival (issue 14 follow-up): a commit pruned and collected while its children stayed
live, then written again with the same id (format 2 ids hold no seq), keeps every indexed parent's seq
below its indexed children's. Found by tests/test_reliability_crash.py (the writer prunes an imported
branch, collects, and imports the same CrewAI folder again); no kill is needed to trigger it. The same rule
on every backend: crewckpt.testing.contract (test_a_revived_commit_*, test_a_crash_while_reviving_*)."""

from __future__ import annotations

from pathlib import Path

import pytest
from reliability_harness import copy_fixtures

from crewckpt.history.store import Store
from crewckpt.views.document import CREWAI
from crewckpt.views.transfer import import_checkpoints

T0 = 1_764_460_800_000_000_000


def _parents_older(s: Store) -> list[tuple[str, str]]:
    seq = {c.id: c.seq for c in s.list()}
    return [(c.id[:12], p[:12]) for c in s.list() for p in c.parents if p in seq and seq[p] >= seq[c.id]]


@pytest.mark.parametrize("fixture", ["agent_json", "flow_dict_star"])
def test_reimport_after_prune_and_gc_keeps_parents_older(tmp_path: Path, fixture: str) -> None:
    src = copy_fixtures(tmp_path / "fx") / fixture
    with Store.init(tmp_path / "s", profile=CREWAI) as s:
        first = import_checkpoints(s, src, branch_prefix="imported/")
        tips = s.branches()
        for b in tips:
            s.prune(b, keep=1)
        s.gc()
        again = import_checkpoints(s, src, branch_prefix="imported/")
        assert again.imported, "prune + gc left nothing to import again"
        assert {c for _, c in first.imported} & {c for _, c in again.imported}  # the same ids come back
        assert _parents_older(s) == []
        rep = s.fsck(full=True)
        assert rep.ok, rep.problems
        for b in tips:  # the tips that stayed live walk back to their roots again
            chain = [c.id for c in s.log(b)]
            assert all(s.info(c).live for c in chain) and not s.info(chain[-1]).parents


def test_a_fetch_that_brings_back_a_pruned_parent_keeps_parents_older(tmp_path: Path) -> None:
    """The receiver pruned and collected c0..c2 under its live c3; the sender's branch `old` at c2 brings
    them back: c3 is renumbered after them."""
    a = Store.init(tmp_path / "a")
    ids: list[str] = []
    for i in range(4):
        ids.append(a.commit({"n": i, "s": "x" * 200 * (i + 1)}, branch="b", parents=ids[-1:], run_id="r",
                            time_ns=T0 + i))
    b = Store.clone(a, tmp_path / "b")
    assert b.prune("b", keep=1) == ids[:3]
    b.gc()
    a.create_branch("old", ids[2])
    rep = b.fetch(a, name="origin")
    assert rep.commits == 3
    assert _parents_older(b) == []
    assert b.fsck(full=True).ok
    assert [c.id for c in b.log("b")] == ids[::-1]
    assert [c.id for c in b.list()][-1] == ids[3]
    a.close()
    b.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_push_racing_a_writer_on_the_new_tip_keeps_parents_older(tmp_path: Path, kind: str) -> None:
    """Without transactions a push moves the remote's ref and then indexes what it brought; a worker that
    commits on the new tip in between (the found pg+s3 race, W3) still gets a seq above the pushed commits."""
    from crewckpt.backends.memory import MemoryBackend
    from crewckpt.backends.sqlite import SqliteBackend
    from crewckpt.testing.contract import Faulty, WithoutTransactions, new_store

    (tmp_path / "r").mkdir()
    inner = MemoryBackend() if kind == "memory" else SqliteBackend.create(tmp_path / "r")
    a = Store.init(tmp_path / "a")
    with new_store(Faulty(inner)) as remote, Store(WithoutTransactions(inner), None) as worker:
        base = remote.commit({"k": 0})
        a.fetch(remote, name="origin")
        a.create_branch("main", base)
        pushed = [a.commit({"k": i, "s": "y" * 300}, branch="main") for i in range(1, 4)]
        won: list[str] = []

        def race(verb: str, args: tuple[object, ...]) -> None:
            entry = args[0] if args else None
            if verb == "reflog_append" and not won and getattr(entry, "ref", "") == "refs/heads/main":
                won.append(worker.commit({"k": "worker"}))

        f = remote.backend
        assert isinstance(f, Faulty)
        f.before = race
        a.push(remote, "main", name="origin")
        assert won and worker.info(won[0]).parents == (pushed[-1],)
        assert [c.id for c in remote.log("main")] == [won[0], *pushed[::-1], base]
        assert _parents_older(remote) == [] and remote.fsck(full=True).ok
    a.close()
