"""Concurrency suite (issue 8, item 3): several processes (and threads) on one store with prune and gc running.

No process sees an exception (in particular no "database is locked"), no acknowledged commit is lost,
every live commit restores exactly, and the shared branch stays one linear chain (every compare-and-swap
on its ref saw the previous tip). The long run is ``scripts/reliability.py``.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path

from reliability_harness import concurrency_run, doc_hash, make_doc

from crewckpt.history.gc import GcBusy
from crewckpt.history.store import Store


def test_processes_commit_to_same_and_own_branches_while_gc_runs(tmp_path: Path) -> None:
    fig = concurrency_run(tmp_path, processes=4, commits=40)
    assert fig.problems == [], "\n".join(fig.problems[:10])
    assert fig.errors == 0 and fig.lost == 0
    assert fig.acknowledged == 160 and fig.restorable + fig.pruned == 160
    assert fig.maint_rounds >= 2


def test_shared_branch_is_one_chain_without_maintenance(tmp_path: Path) -> None:
    fig = concurrency_run(tmp_path, processes=3, commits=30, gc=False)
    assert fig.problems == [] and fig.restorable == 90
    with Store.open(tmp_path / "store") as s:
        chain = [c for c in s.log("shared")]
        assert len(chain) == 45  # 3 writers x 15 commits each on "shared", all in one first-parent chain
        assert len({c.id for c in chain}) == 45


def test_threads_share_one_store_object_with_gc(tmp_path: Path) -> None:
    store = Store.init(tmp_path / "s")
    acked: dict[str, str] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(wid: int) -> None:
        rng = random.Random(wid)
        try:
            for n in range(25):
                doc = make_doc(rng, n, f"t{wid}")
                cid = store.commit(doc, branch="shared" if n % 2 else f"t{wid}")
                with lock:
                    acked[cid] = doc_hash(doc)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def collector() -> None:
        try:
            while not stop.is_set():
                try:
                    store.gc()
                except GcBusy:
                    pass
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    g = threading.Thread(target=collector)
    g.start()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    g.join()
    assert errors == []
    assert len(acked) == 100
    assert store.fsck(full=True).ok
    for cid, h in acked.items():
        assert doc_hash(store.read(cid)) == h
    assert len(list(store.log("shared"))) == 48  # 4 threads x 12 odd-numbered commits
    store.close()


def test_second_gc_is_refused_not_blocked(tmp_path: Path) -> None:
    store = Store.init(tmp_path / "s")
    store.commit({"a": 1})
    with store.backend.gc_lock() as got:
        assert got
        other = Store.open(tmp_path / "s")
        try:
            other.gc(wait_s=0)
            raise AssertionError("expected GcBusy")
        except GcBusy as e:
            assert "\n" not in str(e)
        finally:
            other.close()
    store.gc()
    store.close()


def test_gc_killed_while_holding_its_lock_does_not_block_the_next_gc(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    store_path = tmp_path / "s"
    with Store.init(store_path) as s:
        s.commit({"a": 1})
    code = (f"import sys, time; sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r}); "
            f"from crewckpt.history.store import Store; s = Store.open({str(store_path)!r}); "
            f"cm = s.backend.gc_lock(); assert cm.__enter__(); print('held', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    with Store.open(store_path) as s:
        try:
            s.gc(wait_s=0.5)
            raise AssertionError("gc ran while another process held the lock")
        except GcBusy:
            pass
        p.send_signal(signal.SIGKILL)
        p.wait()
        s.gc(wait_s=0)  # the kernel released the dead holder's lock at once: GcBusy if it were stale
        assert s.fsck(full=True).ok


def test_write_order_not_clock_order(tmp_path: Path) -> None:
    """Clocks that tie or jump backwards (imports, NTP steps) never reorder listing, HEAD or prune."""
    with Store.init(tmp_path / "s") as s:
        times = [5_000, 5_000, 1_000, 9_000_000_000_000_000_000, 2_000]
        ids = [s.commit({"i": i}, time_ns=t) for i, t in enumerate(times)]
        assert [c.id for c in s.list("main")] == ids
        assert s.resolve("HEAD") == ids[-1] == s.resolve("main")
        assert [c.id for c in s.log("main")] == ids[::-1]
        assert s.prune("main", keep=2) == ids[:3]  # the future-dated commit is not "newer" than later writes
        assert [c.id for c in s.list()] == ids[3:]


def test_gc_racing_a_writer_between_epoch_bump_and_mark_keeps_its_commit(tmp_path: Path) -> None:
    """Regression: gc read its cutoff *after* bumping the epoch, and writers stamped objects with a time read
    *before* their transaction. A gc descheduled right after the bump (seen with 9 processes on 2 cores) could
    then sweep a commit a writer made meanwhile: live, acknowledged, and its commit object gone. Here the
    interleaving is forced: bump -> writer commits (sees the new epoch) -> writer starts its next commit ->
    gc marks -> that commit lands -> gc sweeps."""
    import contextlib

    path = tmp_path / "s"
    Store.init(path).close()
    g, w = Store.open(path), Store.open(path)
    w.commit({"n": 0, "pad": "p" * 5000})
    real_g_txn, real_w_txn = g.backend.transaction, w.backend.transaction
    go_w2, w2_waiting = threading.Event(), threading.Event()
    state = {"bumped": False, "hold_w": False}
    results: dict[str, str] = {}

    @contextlib.contextmanager
    def w_txn():  # type: ignore[no-untyped-def]
        if state["hold_w"]:
            w2_waiting.set()
            go_w2.wait(10)
        with real_w_txn() as t:
            yield t

    @contextlib.contextmanager
    def g_txn():  # type: ignore[no-untyped-def]
        with real_g_txn() as t:
            yield t
        if not state["bumped"]:  # gc's first transaction is the epoch bump
            state["bumped"] = True
            results["w1"] = w.commit({"n": 1, "pad": "q" * 5000})
            state["hold_w"] = True
            th.start()
            w2_waiting.wait(10)
            time.sleep(0.01)  # the clock moves on, as it does while a process is descheduled

    def second() -> None:
        results["w2"] = w.commit({"n": 2, "pad": "r" * 5000})

    def on_progress(phase: str, done: int, total: object) -> None:
        if phase == "mark" and not go_w2.is_set():  # roots are read: let the second commit land now
            go_w2.set()
            th.join(10)

    import time
    th = threading.Thread(target=second)
    g.backend.transaction = g_txn  # type: ignore[method-assign]
    w.backend.transaction = w_txn  # type: ignore[method-assign]
    g.gc(progress=on_progress)
    assert set(results) == {"w1", "w2"}
    with Store.open(path) as s:
        assert s.fsck(full=True).ok
        assert s.read(results["w2"])["n"] == 2 and s.read(results["w1"])["n"] == 1
    g.close()
    w.close()
