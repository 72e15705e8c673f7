"""gc on S3 reclaims space (issue 17): the gc lease, packs rewritten then deleted, a writer reusing objects
during gc, kill -9 of gc at random points. All on the real SeaweedFS server of the session (conftest)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.s3


@pytest.fixture
def s3_store(s3_url: str) -> str:
    """An empty store at ``s3_url``."""
    from crewckpt.history.store import Store
    Store.init(s3_url).close()
    return s3_url


def _backend(url: str, client: Any = None, **kw: Any) -> Any:
    from crewckpt.backends.s3 import S3Backend
    return S3Backend(url, client=client, gc_grace_s=0.0, **kw)


def _store(b: Any) -> Any:
    from crewckpt.history.store import Store
    return Store(b, None, location=b.where)


def _listed_bytes(b: Any) -> int:
    return int(b.disk_bytes())


def _doc(i: int) -> dict[str, Any]:
    rnd = random.Random(i)
    return {"step": i, "notes": [rnd.getrandbits(2048).to_bytes(256, "big").hex() for _ in range(40)],
            "shared": "common text " * 200}


def test_prune_and_gc_give_the_bytes_back(s3_store: str) -> None:
    s3_url = s3_store
    b = _backend(s3_url)
    st = _store(b)
    ids = [st.commit(_doc(i), branch="main") for i in range(12)]
    before = _listed_bytes(b)
    st.prune("main", keep=2)
    rep = st.gc()
    after = _listed_bytes(b)
    assert after * 3 < before, (before, after)  # 10 of 12 documents' unique bytes went
    assert abs(rep.bytes_after - after) < 200 and rep.deleted_bytes > 0  # (the released lease is smaller)
    fresh = _store(_backend(s3_url))
    for i in (10, 11):
        assert fresh.read(ids[i]) == _doc(i)
    assert fresh.fsck(full=True).ok
    keys = [k for k, _ in fresh.backend._list("packs")]
    assert len(keys) <= 2, keys  # the per-checkpoint packs were merged
    again = fresh.gc()  # nothing left to do: no pack rewritten
    assert _listed_bytes(b) <= after and again.deleted_objects == 0


def test_a_second_gc_at_once_is_refused_in_one_line_and_a_dead_holders_lease_expires(s3_store: str) -> None:
    s3_url = s3_store
    from crewckpt.errors import GcBusy
    a = _backend(s3_url)
    st = _store(_backend(s3_url))
    st.commit({"x": 1}, branch="main")
    with a.lock("gc") as got:
        assert got
        with pytest.raises(GcBusy) as e:
            st.gc(wait_s=0)
        msg = str(e.value)
        assert "\n" not in msg and "another gc is running" in msg and "held by" in msg and "UTC" in msg
    st.gc(wait_s=0)  # released: free at once
    # a holder that died without releasing: its lease is free once it expired
    short = _backend(s3_url, lease_s=1.0)
    cm = short.lock("gc")
    assert cm.__enter__()
    lease = short._leases["gc"]
    lease._stop.set()  # as if the process died: no more renewals, no release
    lease._thread.join()
    lease.lost = "simulated death"  # so leaving the block below releases nothing
    with pytest.raises(GcBusy):
        st.gc(wait_s=0)
    st.gc(wait_s=30)  # waits for the expiry, then takes it over
    cm.__exit__(None, None, None)


class _Hooked:
    """A boto3 client that calls ``hook(op, key, when)`` around PUTs and deletes (when: "before"/"after")."""

    def __init__(self, inner: Any, hook: Callable[[str, str, str], None]) -> None:
        self._inner, self._hook = inner, hook

    def put_object(self, **kw: Any) -> Any:
        self._hook("put", kw["Key"], "before")
        r = self._inner.put_object(**kw)
        self._hook("put", kw["Key"], "after")
        return r

    def delete_objects(self, **kw: Any) -> Any:
        key = kw["Delete"]["Objects"][0]["Key"] if kw["Delete"]["Objects"] else ""
        self._hook("delete", key, "before")
        r = self._inner.delete_objects(**kw)
        self._hook("delete", key, "after")
        return r

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize("phase", ["before-record", "before-bump", "after-bump", "deleting", "deleted"])
def test_a_writer_reusing_objects_during_gc_keeps_them_readable(s3_store: str, phase: str) -> None:
    """A writer re-commits a pruned document while gc runs: its view (listed after gc's epoch bump, before
    the sweep) shows the objects present, so it only touches them; its PUT is held until gc reaches
    ``phase`` of reclaiming (gc waits there until the checkpoint is acknowledged). The acknowledged checkpoint reads back, fsck
    is clean, and a later gc keeps it."""
    s3_url = s3_store
    from crewckpt.backends.s3 import S3Backend
    setup = _store(_backend(s3_url))
    reused = {"big": "reused " * 3000, "n": 1}
    setup.commit(reused, branch="main")
    setup.commit({"other": "o" * 3000}, branch="main")
    setup.commit({"third": "t" * 3000}, branch="main")
    setup.prune("main", keep=1)  # `reused` is garbage now, unless the writer reuses it
    plain = S3Backend(s3_url).s3
    decided = threading.Event()  # the writer listed and chose to touch; its pack PUT waits
    release, landed, done = threading.Event(), threading.Event(), threading.Event()
    epochs, deletes = [0], [0]
    result: list[Any] = []

    def writer_hook(op: str, key: str, when: str) -> None:
        if op == "put" and "/packs/" in key and when == "before" and not decided.is_set():
            decided.set()
            assert release.wait(120)
        elif op == "put" and "/packs/" in key and when == "after" and release.is_set():
            landed.set()

    w = _store(_backend(s3_url, client=_Hooked(plain, writer_hook)))

    def run_writer() -> None:
        try:
            result.append(w.commit(reused, branch="side"))
        except BaseException as e:  # reported by the assertions below
            result.append(e)
        finally:
            done.set()

    def let_writer_land() -> None:  # and finish: its epoch re-check runs before gc goes on
        if not release.is_set():
            release.set()
            assert landed.wait(120) and done.wait(120)

    def gc_hook(op: str, key: str, when: str) -> None:
        if op == "put" and key.endswith("/meta/gc_epoch"):
            if when == "before" and epochs[0] == 1 and phase == "before-bump":
                let_writer_land()
            if when == "after":
                epochs[0] += 1
                if epochs[0] == 1:  # gc's first bump: the writer starts now and lists before the sweep
                    threading.Thread(target=run_writer, daemon=True).start()
                    assert decided.wait(120)
                elif epochs[0] == 2 and phase == "after-bump":
                    let_writer_land()
        if op == "delete" and "/packs/" in key:
            deletes[0] += 1
            if (when == "before" and phase == "deleting") or (when == "after" and phase == "deleted"):
                let_writer_land()

    gb = _backend(s3_url, client=_Hooked(plain, gc_hook))
    real_put = gb._put_checked

    def before_record(key: str, body: bytes, what: str) -> None:
        if what.startswith("publish") and phase == "before-record":
            let_writer_land()
        real_put(key, body, what)
    gb._put_checked = before_record
    g = _store(gb)
    try:
        g.gc()
    finally:
        release.set()
        assert done.wait(120)
    assert isinstance(result[0], str), result
    assert deletes[0] >= 1 and epochs[0] == 2, "gc reclaimed nothing: the test did not exercise it"
    fresh = _store(_backend(s3_url))
    assert fresh.read(result[0]) == reused
    assert fresh.fsck(full=True).ok
    fresh.gc()
    fresh = _store(_backend(s3_url))
    assert fresh.read(result[0]) == reused and fresh.fsck(full=True).ok


_GC = """
import os, signal, sys
sys.path.insert(0, os.environ["CKPT_TESTS"])
from crewckpt.backends.s3 import S3Backend
from crewckpt.history.store import Store
url, kill_at = sys.argv[1], int(sys.argv[2])
n = [0]
class Killing:
    def __init__(self, inner):
        self._inner = inner
    def _count(self):
        n[0] += 1
        if n[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    def put_object(self, **kw):
        self._count()
        return self._inner.put_object(**kw)
    def delete_objects(self, **kw):
        self._count()
        return self._inner.delete_objects(**kw)
    def __getattr__(self, name):
        return getattr(self._inner, name)
b = S3Backend(url, gc_grace_s=0.0, lease_s=3.0)
b._check_writable()  # the one-time self-test is not a point of gc
b.s3 = Killing(b.s3)
st = Store(b, None, location=b.where)
st.gc(wait_s=60)
print("WRITES", n[0], flush=True)
"""


def _run_gc(url: str, kill_at: int) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CKPT_TESTS=os.path.dirname(__file__))
    return subprocess.run([sys.executable, "-c", _GC, url, str(kill_at)], capture_output=True, text=True, env=env,
                          timeout=240)


def test_kill_9_of_gc_at_random_points_keeps_every_live_commit(s3_store: str) -> None:
    s3_url = s3_store
    rnd = random.Random(int(os.environ.get("CKPT_TEST_SEED", "17")))
    st = _store(_backend(s3_url))
    live: dict[str, dict[str, Any]] = {}
    n = 0

    def grow(k: int) -> None:
        nonlocal n
        for _ in range(k):
            d = _doc(n)
            live[st.commit(d, branch="main")] = d
            n += 1
        st.prune("main", keep=2)
        kept = {c.id for c in st.list()}
        for cid in list(live):
            if cid not in kept:
                del live[cid]

    grow(6)
    full = _run_gc(s3_url, 0)  # a whole gc: how many writes it makes
    assert full.returncode == 0, full.stderr[-2000:]
    total = int(full.stdout.split()[-1])
    killed = 0
    for _ in range(5):
        grow(4)
        p = _run_gc(s3_url, rnd.randint(1, total + 4))
        if p.returncode == -signal.SIGKILL:
            killed += 1
        else:
            assert p.returncode == 0, p.stderr[-2000:]
        fresh = _store(_backend(s3_url))
        for cid, d in live.items():
            assert fresh.read(cid) == d
        assert fresh.fsck(full=True).ok
    assert killed >= 2, "the random points were all past the end of gc"
    before = _listed_bytes(st.backend)
    st.gc(wait_s=60)  # waits out a killed gc's lease, then finishes the job
    assert _listed_bytes(st.backend) < before
    fresh = _store(_backend(s3_url))
    for cid, d in live.items():
        assert fresh.read(cid) == d
    assert fresh.fsck(full=True).ok
