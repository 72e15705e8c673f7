"""Real processes on one store: concurrent writers, gc racing writers, kill -9 during gc."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from crewckpt import Store

WORKER = str(Path(__file__).resolve().parent / "store_worker.py")


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, WORKER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def acked(path: Path) -> list[tuple[str, str]]:
    return [tuple(json.loads(line)) for line in path.read_text().splitlines()]  # type: ignore[misc]


def digest(doc: object) -> str:
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()


def test_four_processes_500_transactions_each_lose_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s"
    Store.init(store).close()
    procs = [spawn("commit", str(store), "main" if i < 2 else f"b{i}", "500", str(tmp_path / f"ack{i}"), f"w{i}")
             for i in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "locked" not in err
    s = Store.open(store)
    ids = [a for i in range(4) for a in acked(tmp_path / f"ack{i}")]
    assert len(ids) == 2000 and len({c for c, _ in ids}) == 2000
    live = {c.id for c in s.list()}
    assert live == {c for c, _ in ids}
    for cid, h in ids[::50]:
        assert digest(s.read(cid)) == h
    for i in range(4):  # each run is one linear chain in write order
        chain = [c for c, _ in acked(tmp_path / f"ack{i}")]
        assert s.info(chain[-1]).run_id == f"w{i}" and s.runs()[f"w{i}"] == chain[-1]
    # HEAD names main: its reflog has exactly main's 1000 commits, as one unbroken chain of moves, and none
    # of the writers on b2/b3 moved it (each move landed in the transaction of the commit that caused it)
    head_log = s.reflog("HEAD")
    on_main = {c for i in (0, 1) for c, _ in acked(tmp_path / f"ack{i}")}
    assert s.current_branch() == "main" and {e.new.hex() for e in head_log if e.new} == on_main
    assert len(head_log) == 1000 and head_log[0].old is None
    assert all(a.new == b.old for a, b in zip(head_log, head_log[1:]))
    assert s.fsck().ok


def test_gc_while_two_processes_write_reused_objects(tmp_path: Path) -> None:
    store = tmp_path / "s"
    s = Store.init(store)
    # objects the writers will reuse, made unreachable first so a careless gc would sweep them
    from store_worker import doc_for
    for i in range(40):
        s.commit(doc_for("w0", i), branch="old")
    s.delete_branch("old")
    s.prune("old", keep=1)
    gc = spawn("gc", str(store), "8")
    writers = [spawn("commit", str(store), f"w{i}", "150", str(tmp_path / f"ack{i}"), f"w{i}") for i in range(2)]
    for p in [*writers, gc]:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    s = Store.open(store)
    report = s.fsck(full=True)
    assert report.ok, report
    for i in range(2):
        tips = acked(tmp_path / f"ack{i}")[-3:]
        for cid, h in tips:  # the gc loop kept 3 per branch: each of them restores exactly
            assert digest(s.read(cid)) == h
    assert int(s.backend.meta_get("gc_epoch") or 0) >= 2


def test_kill_9_during_gc_then_fsck_clean_and_rerun_finishes(tmp_path: Path) -> None:
    store = tmp_path / "s"
    s = Store.init(store)
    from store_worker import doc_for
    ids = [s.commit(doc_for("k", i)) for i in range(120)]
    keep = ids[-5:]
    docs = {c: digest(doc_for("k", 115 + j)) for j, c in enumerate(keep)}
    s.prune("main", keep=5)
    s.close()
    kills = 0
    for delay in (0.05, 0.15, 0.3, 0.5):
        p = subprocess.Popen([sys.executable, WORKER, "gc-forever", str(store)], stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        time.sleep(delay)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        kills += 1
        s = Store.open(store)
        assert s.fsck().ok
        for c, h in docs.items():
            assert digest(s.read(c)) == h
        s.close()
    s = Store.open(store)
    s.gc()
    assert s.gc(dry_run=True).deleted_objects == 0
    assert s.fsck(full=True).ok and kills == 4
    assert {c.id for c in s.list()} == set(keep)
