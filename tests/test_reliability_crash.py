"""Crash suite (issue 8, item 2): SIGKILL at random points, a full disk, a read-only store.

After any of these: fsck is clean, every acknowledged commit restores exactly, the branch head is where the
last successful write left it, the store folder holds no temporary files, and the error the user saw was
one line from crewckpt (never a raw sqlite3/OSError). The long run is ``scripts/reliability.py``.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_harness import STORE_FILES, AckLog, copy_fixtures, crash_run, doc_hash, make_doc, verify

from crewckpt.backends.base import StoreWriteError
from crewckpt.errors import CkptError
from crewckpt.history.store import Store

HERE = Path(__file__).resolve().parent


def test_sigkill_at_random_points_loses_no_acknowledged_commit(tmp_path: Path) -> None:
    fig = crash_run(tmp_path, trials=10, seed=int(os.environ.get("CKPT_CRASH_SEED", "8")), max_delay_s=0.5,
                    trials_per_store=5, min_acks=6)
    assert fig.problems == [], "\n".join(fig.problems[:10])
    assert fig.kills == fig.trials == 10
    assert fig.corrupt_stores == 0
    assert fig.acknowledged >= 10 * 6 and fig.restorable + fig.pruned == fig.acknowledged


def test_verify_notices_a_lost_commit(tmp_path: Path) -> None:
    """The checker itself can fail: an acknowledged id the store never had is reported."""
    Store.init(tmp_path / "s").close()
    log = AckLog({"ab" * 32: "0" * 32}, set(), [], [])
    v = verify(tmp_path / "s", log)
    assert v.problems and v.restorable == 0


def _files(store: Path) -> set[str]:
    return {p.name for p in store.iterdir()}


@contextlib.contextmanager
def small_fs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (root only); skips the test where mounting is impossible."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                       check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _fill(fs: Path, leave: int) -> Path:
    """Fill ``fs`` with a file, leaving about ``leave`` bytes free; returns the filler."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    os.close(fd)
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


@pytest.mark.parametrize("doc_mb", [0.4, 12], ids=["fails-at-commit", "fails-mid-transaction"])
def test_disk_full_commit_fails_cleanly(tmp_path: Path, doc_mb: float) -> None:
    with small_fs(tmp_path / "fs", "24m") as fs:
        store = Store.init(fs / "s")
        docs = {store.commit(make_doc(__import__("random").Random(i), i, "main")): i for i in range(5)}
        tips = store.branches()
        filler = _fill(fs, 256 * 1024)
        big = {"blob": os.urandom(int(doc_mb * 1e6)).hex()}
        with pytest.raises(StoreWriteError) as e:
            store.commit(big)
        msg = str(e.value)
        assert "\n" not in msg and "disk full" in msg
        assert store.branches() == tips
        assert _files(fs / "s") <= STORE_FILES
        assert store.fsck(full=True).ok
        assert sorted(store.read(c)["entities"][0]["inputs"]["n"] for c in docs) == sorted(docs.values())
        with contextlib.suppress(StoreWriteError):
            store.gc()  # gc on a full disk either works or fails cleanly
        assert store.fsck(full=True).ok and store.branches() == tips
        filler.unlink()
        cid = store.commit(big)  # the store works again once space is back
        assert store.read(cid) == big
        store.close()
        with Store.open(fs / "s") as again:
            assert again.fsck(full=True).ok and again.read("main") == big


def test_disk_full_during_import_keeps_what_was_imported(tmp_path: Path) -> None:
    src = copy_fixtures(tmp_path / "fixtures")
    with small_fs(tmp_path / "fs", "3m") as fs:
        store = Store.init(fs / "s")
        filler = _fill(fs, 300 * 1024)
        from crewckpt.views.transfer import import_checkpoints
        with pytest.raises(StoreWriteError):
            for _ in range(30):  # grow until the disk is full
                import_checkpoints(store, src / "flow_dict_star", branch_prefix=f"i{_}/")
                store.commit({"pad": os.urandom(200_000).hex()}, branch="pad")
        assert store.fsck(full=True).ok
        assert _files(fs / "s") <= STORE_FILES
        filler.unlink()
        rep = import_checkpoints(store, src / "agent_json")
        assert rep.imported and store.fsck(full=True).ok


def test_file_size_limit_write_error_is_one_line(tmp_path: Path) -> None:
    """Without root (no tmpfs): RLIMIT_FSIZE makes the kernel refuse to grow the file (EFBIG)."""
    store_path = tmp_path / "s"
    with Store.init(store_path) as s:
        s.commit({"a": 1})
        tip = s.branches()["main"]
    code = textwrap.dedent(f"""
        import os, resource, signal, sys
        sys.path.insert(0, {str(HERE.parent)!r})
        from crewckpt.history.store import Store
        from crewckpt.errors import CkptError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        s = Store.open({str(store_path)!r})
        size = sum(p.stat().st_size for p in s.path.iterdir())
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 64 * 1024, size + 64 * 1024))
        try:
            s.commit({{"big": os.urandom(3_000_000).hex()}})
            print("NOERROR")
        except CkptError as e:
            print(type(e).__name__, "|", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert line.startswith("StoreWriteError |") and "\n" not in line, line
    with Store.open(store_path) as s:
        assert s.branches()["main"] == tip and s.fsck(full=True).ok
    assert _files(store_path) <= STORE_FILES


def _as_nobody(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as user nobody (when root) with ``Store`` imported. Every module of the layers below
    CrewAI is imported before dropping root: the clone (and its .venv) may sit in a folder only root can
    read, as a CI checkout under a private temporary folder does, so nothing may be imported after."""
    prog = textwrap.dedent(f"""
        import importlib, os, pkgutil, sys
        sys.path.insert(0, {str(HERE.parent)!r})
        import crewckpt, filelock
        from crewckpt.history.store import Store
        import crewckpt.errors
        for layer in ("format", "backends", "history", "views"):  # not crewckpt itself: walking it imports
            pkg = importlib.import_module("crewckpt." + layer)   # crewckpt.crewai, i.e. crewai (~7 s of CPU)
            for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
                importlib.import_module(m.name)
        if os.geteuid() == 0:
            os.setgid(65534); os.setuid(65534)
    """) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=60, cwd=cwd,
                          check=False)


def _reachable_by_all(folder: Path) -> bool:
    """True when every user can enter ``folder`` and each folder above it."""
    return all(p.stat().st_mode & 0o001 for p in (folder.resolve(), *folder.resolve().parents))


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every user can enter (pytest's tmp folders, and TMPDIR on some CI runners, are private)."""
    import shutil
    import tempfile
    bases = [Path(b) for b in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm") if Path(b).is_dir()]
    base = next((b for b in bases if _reachable_by_all(b) and os.access(b, os.W_OK)), None)
    if base is None:
        pytest.fail(f"no temporary folder every user can enter among {[str(b) for b in bases]}")
    d = Path(tempfile.mkdtemp(prefix="ckpt-ro-", dir=base))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_read_only_store_reads_and_refuses_writes_in_one_line(open_dir: Path) -> None:
    tmp_path = open_dir
    store_path = tmp_path / "s"
    with Store.init(store_path, private=False) as s:  # another user reads it: a shared store
        cid = s.commit({"a": 1})
        s.commit({"a": 2}, branch="b")
    if os.geteuid() != 0:
        for p in (store_path, *store_path.iterdir()):
            p.chmod(0o555 if p.is_dir() else 0o444)
    before = {p.name: p.stat().st_mtime_ns for p in store_path.iterdir()}
    out = _as_nobody(f"""
        from crewckpt.errors import CkptError
        s = Store.open({str(store_path)!r})
        print("read", s.read({cid!r}), sorted(s.branches()), s.fsck(full=True).ok)
        for name, op in [("commit", lambda: s.commit({{"a": 3}})), ("branch", lambda: s.create_branch("x")),
                         ("prune", lambda: s.prune("main", keep=1)), ("gc", lambda: s.gc())]:
            try:
                op()
                print(name, "NOERROR")
            except CkptError as e:
                print(name, type(e).__name__, "|", e)
    """, tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "read {'a': 1} ['b', 'main'] True"
    for ln in lines[1:]:
        assert "StoreWriteError | " in ln and "read-only" in ln, ln
    assert len(lines) == 5
    assert {p.name: p.stat().st_mtime_ns for p in store_path.iterdir()} == before
    if os.geteuid() != 0:
        for p in (store_path, *store_path.iterdir()):
            p.chmod(0o755 if p.is_dir() else 0o644)


@pytest.mark.parametrize("name", ["a?b", "c#d", "e%20f"])
def test_store_path_with_uri_characters_creates_nothing_outside(tmp_path: Path, name: str) -> None:
    """A '?' or '#' in the folder name once made SQLite open (and create) a database next to the folder."""
    (tmp_path / name).mkdir()
    store_path = tmp_path / name / "store"
    with Store.init(store_path) as s:
        s.commit({"x": 1})
    with Store.open(store_path) as s:
        assert s.read("main") == {"x": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
    assert _files(store_path) <= STORE_FILES


@pytest.mark.crewai
def test_crewai_run_continues_when_the_disk_is_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from crewckpt.testing import OFFLINE_ENV
    for k, v in OFFLINE_ENV.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    from crewai.events.event_bus import crewai_event_bus
    from crewai.events.types.checkpoint_events import CheckpointFailedEvent

    from crewckpt.crewai import CheckpointConfig
    from crewckpt.crewai.writer import forget_stores
    from crewckpt.testing import research_crew
    with small_fs(tmp_path / "fs", "2m") as fs:
        monkeypatch.chdir(fs)
        research_crew(2, checkpoint=CheckpointConfig()).kickoff(inputs={"topic": "otters"})
        forget_stores()
        with Store.open(fs / ".ckpt") as s:
            before = {c.id: doc_hash(s.read(c.id)) for c in s.list()}
        assert before
        filler = _fill(fs, 16 * 1024)
        failed = []
        with crewai_event_bus.scoped_handlers():
            @crewai_event_bus.on(CheckpointFailedEvent)
            def _seen(source: object, event: CheckpointFailedEvent) -> None:
                failed.append(event)
            out = research_crew(3, checkpoint=CheckpointConfig(on_events=["*"])).kickoff(
                inputs={"topic": "otters"})
            crewai_event_bus.flush()
        forget_stores()
        assert "task3" in out.raw
        assert failed and all(e.error and "\n" not in e.error for e in failed)
        filler.unlink()
        with Store.open(fs / ".ckpt") as s:
            assert s.fsck(full=True).ok
            after = {c.id: doc_hash(s.read(c.id)) for c in s.list()}
        assert {k: after[k] for k in before} == before
        assert _files(fs / ".ckpt") <= STORE_FILES
        monkeypatch.chdir(tmp_path)
        crewai_event_bus.reset_runtime_state()


def test_errors_are_crewckpt_errors() -> None:
    assert issubclass(StoreWriteError, CkptError)


def test_concurrent_init_of_one_store_gives_one_complete_store(tmp_path: Path) -> None:
    """Several processes creating one store at once (two CrewAI runs starting in a fresh folder) once saw a
    half-made store.db: "not an SQLite database", "no such table: meta", or a raw sqlite3 error."""
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(HERE.parent)!r})
        from crewckpt.history.store import Store
        from crewckpt.errors import StoreExists
        t0 = float(sys.argv[2])
        while time.time() < t0:
            pass
        try:
            s = Store.init(sys.argv[1]); print("created")
        except StoreExists:
            s = Store.open(sys.argv[1]); print("opened")
        s.commit({{"pid": 1}}, branch="b" + sys.argv[3])
    """)
    import time
    for trial in range(3):
        path = tmp_path / f"s{trial}"
        t0 = time.time() + 1.0
        procs = [subprocess.Popen([sys.executable, "-c", code, str(path), str(t0), str(i)], text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(4)]
        outs = [p.communicate(timeout=60) for p in procs]
        assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
        assert sorted(o.strip() for o, _ in outs).count("created") == 1
        with Store.open(path) as s:
            assert len(s.branches()) == 4 and s.fsck(full=True).ok
        assert _files(path) <= STORE_FILES


def test_init_killed_at_any_moment_leaves_no_half_made_store(tmp_path: Path) -> None:
    import random
    import signal
    import time
    rng = random.Random(3)
    code = f"import sys; sys.path.insert(0, {str(HERE.parent)!r}); from crewckpt.history.store import Store; " \
           f"Store.init(sys.argv[1])"
    for trial in range(8):
        path = tmp_path / f"s{trial}"
        p = subprocess.Popen([sys.executable, "-c", code, str(path)])
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.0005)
        time.sleep(rng.uniform(0, 0.01))
        p.send_signal(signal.SIGKILL)
        p.wait()
        try:
            s = Store.open(path)  # complete, or absent so init works
        except CkptError:
            s = Store.init(path)
        s.commit({"ok": trial})
        assert s.fsck(full=True).ok
        s.close()
        assert _files(path) <= STORE_FILES
