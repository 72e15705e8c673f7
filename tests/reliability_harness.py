"""Fault-injection harness shared by tests/test_reliability_*.py and scripts/reliability.py.

Real processes, real SQLite files, real SIGKILL. Three roles run as ``python tests/reliability_harness.py
ROLE ...`` subprocesses:

* ``writer STORE ACKS SEED FIXTURES``: commits, forks, prunes, gc runs and CrewAI imports in a random mix
  until killed. After every acknowledged write it appends a line to ACKS and fsyncs it:
  ``C <commit id> <doc hash>`` (the commit is durable and must restore exactly), ``P <commit id>`` (a prune
  is about to remove, or removed, that commit: it may legitimately disappear) and ``O <op>`` (the op being
  started; not fsynced, only used to count where kills landed).
* ``worker STORE ACKS WID N SHARED``: N commits alternating its own branch and a shared one (concurrency).
* ``maint STORE ACKS STOPFILE``: prune + gc in a loop until STOPFILE exists (concurrency).

:func:`verify` then checks the store as a user would after the crash: fsck --full clean, no leftover
temporary files, every acknowledged commit restores byte-for-byte (or, if a prune named it, is either
exact or cleanly unknown).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from crewckpt.errors import CkptError, UnknownRevision
from crewckpt.history.store import Store

PY = sys.executable
STORE_FILES = {"store.db", "store.db-wal", "store.db-shm", "gc.lock"}
"""Everything a store folder may hold; anything else (temp files, journals) is a leak."""
IMPORT_FIXTURES = ("flow_json", "agent_json", "flow_dict_star")
"""Small real CrewAI layouts the writer imports (a few hundred KB, forks and several branches)."""


def fixtures_root() -> Path:
    """The CrewAI 1.15.30 fixtures (vendored archive if present, else the shared read-only copy)."""
    try:
        sys.path.insert(0, str(HERE))
        from crewai_fixtures import ensure  # type: ignore[import-not-found]
        return Path(ensure())
    except Exception:  # noqa: BLE001 - no vendored archive: use the shared copy
        return Path("/work/shared/fixtures/crewai-1.15.30")
    finally:
        if sys.path and sys.path[0] == str(HERE):
            sys.path.pop(0)


def copy_fixtures(dest: Path) -> Path:
    """Copy the small import fixtures into ``dest`` (tests never touch the shared copy); returns ``dest``."""
    src = fixtures_root()
    dest.mkdir(parents=True, exist_ok=True)
    for name in IMPORT_FIXTURES:
        shutil.copytree(src / name, dest / name, dirs_exist_ok=True)
    return dest


def doc_hash(doc: Any) -> str:
    """Hash of a JSON value's exact text (key order, string contents, number spelling): 32 hex chars."""
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def make_doc(rng: random.Random, n: int, tag: str) -> dict[str, Any]:
    """A CrewAI-shaped checkpoint document that grows with ``n`` (shared history, new tail, odd values)."""
    tasks = [{"id": f"task{k}", "description": f"research {k} " * 20,
              "output": (None if k >= n % 7 else {"raw": f"[{tag}] answer {k} " * rng.randint(1, 40)})}
             for k in range(6)]
    nodes = {f"ev{k}": {"type": "task_completed" if k % 3 else "llm_call", "seq": k,
                        "payload": ("x" * 50 + str(k)) * (1 + k % 5)} for k in range(n % 40)}
    return {
        "crewai_version": "1.15.30", "branch": tag, "parent_id": None, "trigger": "task_completed",
        "entities": [{"entity_type": "crew", "name": "c", "tasks": tasks,
                      "inputs": {"topic": "otters", "n": n, "tag": tag}}],
        "event_record": {"nodes": nodes},
        "odd": {"big": 10 ** 30 + n, "neg0": -0.0, "f": 1e308, "tiny": 5e-324, "u": "é\u2028\U0001f9a6",
                "sur": "\ud800x", "empty": [{}, [], ""], "blob": rng.randbytes(rng.randint(0, 3000)).hex()},
    }


class Acks:
    """Append-only acknowledgement file; every durable line is fsynced before the writer goes on."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(self, text: str, durable: bool = True) -> None:
        os.write(self.fd, (text + "\n").encode())
        if durable:
            os.fsync(self.fd)


@dataclasses.dataclass
class AckLog:
    """Parsed acknowledgements: commit id -> doc hash, ids a prune may have removed, ops started."""

    commits: dict[str, str]
    pruned: set[str]
    ops: list[str]
    errors: list[str]

    @classmethod
    def read(cls, *paths: Path) -> AckLog:
        log = cls({}, set(), [], [])
        for p in paths:
            if not p.exists():
                continue
            text = p.read_text()
            lines = text.split("\n")[:-1]  # a torn last line (no newline) was never acknowledged
            for ln in lines:
                kind, _, rest = ln.partition(" ")
                if kind == "C":
                    cid, h = rest.split()
                    log.commits[cid] = h
                elif kind == "P":
                    log.pruned.add(rest)
                elif kind == "O":
                    log.ops.append(rest)
                elif kind == "E":
                    log.errors.append(rest)
        return log


def _fixture_hashes(fixtures: Path) -> dict[str, str]:
    from crewckpt.views.reader import open_source
    out = {}
    for name in IMPORT_FIXTURES:
        with open_source(fixtures / name) as src:
            for cp in src.checkpoints():
                out[cp.record.checkpoint_id] = doc_hash(cp.value)
    return out


def _prune(store: Store, acks: Acks, branch: str, keep: int) -> None:
    for cid in store.prune(branch, keep=keep, dry_run=True):
        acks.line("P " + cid, durable=False)
    os.fsync(acks.fd)
    for cid in store.prune(branch, keep=keep):  # single writer: the same set unless a race added more
        acks.line("P " + cid)


def writer_main(store_path: str, ack_path: str, seed: int, fixtures: str) -> None:
    """Role ``writer``: random writes forever (the harness kills it)."""
    rng = random.Random(seed)
    acks = Acks(Path(ack_path))
    hashes = _fixture_hashes(Path(fixtures))
    store = Store.open(store_path)
    branches = ["main", "b1"]
    n = 0
    acks.line("O start", durable=False)
    while True:
        r = rng.random()
        if r < 0.70:
            acks.line("O commit", durable=False)
            branch = rng.choice(branches)
            doc = make_doc(rng, n, branch)
            cid = store.commit(doc, branch=branch, trigger="task_completed")
            acks.line(f"C {cid} {doc_hash(doc)}")
            n += 1
        elif r < 0.75 and store.branches():
            acks.line("O fork", durable=False)
            name = f"fork-{seed}-{n}"
            base = rng.choice(list(store.branches().values()))
            doc = make_doc(rng, n, name)
            cid = store.commit(doc, branch=name, parents=[base], trigger="fork")
            acks.line(f"C {cid} {doc_hash(doc)}")
            branches.append(name)
            n += 1
        elif r < 0.84:
            acks.line("O prune", durable=False)
            b = rng.choice(list(store.branches()) or ["main"])  # imported branches too (re-import after gc)
            _prune(store, acks, b, rng.randint(1, 4))
        elif r < 0.94:
            acks.line("O gc", durable=False)
            store.gc()
        else:
            acks.line("O import", durable=False)
            name = rng.choice(IMPORT_FIXTURES)
            rep = store_import(store, Path(fixtures) / name)
            for crewai_id, cid in rep.imported + rep.present:
                acks.line(f"C {cid} {hashes[crewai_id]}", durable=False)
            os.fsync(acks.fd)


def store_import(store: Store, path: Path) -> Any:
    from crewckpt.views.transfer import import_checkpoints
    return import_checkpoints(store, path, branch_prefix="imported/")


def worker_main(store_path: str, ack_path: str, wid: int, count: int, shared: str) -> None:
    """Role ``worker``: ``count`` commits alternating ``w<wid>`` and the shared branch."""
    rng = random.Random(wid)
    acks = Acks(Path(ack_path))
    store = Store.open(store_path)
    for n in range(count):
        branch = shared if n % 2 else f"w{wid}"
        doc = make_doc(rng, n, f"{branch}-{wid}")
        cid = store.commit(doc, branch=branch)
        acks.line(f"C {cid} {doc_hash(doc)}")


def maint_main(store_path: str, ack_path: str, stop: str) -> None:
    """Role ``maint``: prune the shared branch and ``w0`` (keep 10..30) and gc, until ``stop``."""
    rng = random.Random(7)
    acks = Acks(Path(ack_path))
    from crewckpt.history.gc import GcBusy
    store = Store.open(store_path)
    rounds = busy = 0
    while not os.path.exists(stop) or rounds < 2:
        for b in [b for b in store.branches() if b in ("shared", "w0")]:  # others stay whole: restorable
            keep = rng.randint(10, 30)
            for cid in store.prune(b, keep=keep, dry_run=True):
                acks.line("P " + cid, durable=False)
            for cid in store.prune(b, keep=keep):
                acks.line("P " + cid, durable=False)
            os.fsync(acks.fd)
        try:
            store.gc()
            rounds += 1
        except GcBusy:  # a writer's automatic repack holds the gc lock for a moment: retry, as a scheduler would
            busy += 1
        time.sleep(rng.uniform(0, 0.05))
    acks.line(f"O rounds {rounds}")
    acks.line(f"O busy {busy}")


def _main(argv: list[str]) -> int:
    role = argv[0]
    err_file = os.environ.get("CKPT_HARNESS_ERRORS")
    try:
        if role == "writer":
            writer_main(argv[1], argv[2], int(argv[3]), argv[4])
        elif role == "worker":
            worker_main(argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5])
        elif role == "maint":
            maint_main(argv[1], argv[2], argv[3])
        else:
            raise SystemExit(f"unknown role {role}")
    except BaseException as e:  # record every failure the user would see
        if err_file:
            with open(err_file, "a") as f:
                f.write(f"{role} {type(e).__module__}.{type(e).__name__}: {e}\n"
                        + "".join(traceback.format_exception(e)).replace("\n", "\n  ") + "\n")
        raise
    return 0


# -- harness side ---------------------------------------------------------------------------------------------


def spawn(*args: str, errors: Path | None = None, **kw: Any) -> subprocess.Popen[bytes]:
    """Start a harness role in a fresh Python process."""
    env = dict(os.environ)
    if errors is not None:
        env["CKPT_HARNESS_ERRORS"] = str(errors)
    return subprocess.Popen([PY, str(Path(__file__).resolve()), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)


@dataclasses.dataclass
class Verdict:
    """What :func:`verify` found."""

    acknowledged: int = 0
    restorable: int = 0
    pruned_ok: int = 0
    fsck_ok: bool = True
    problems: list[str] = dataclasses.field(default_factory=list)


def verify(store_path: Path, log: AckLog) -> Verdict:
    """Open the store as a fresh process would and check every acknowledged commit (see module docstring)."""
    v = Verdict()
    stray = sorted(p.name for p in store_path.iterdir() if p.name not in STORE_FILES)
    if stray:
        v.problems.append(f"leftover files in the store folder: {stray}")
    with Store.open(store_path) as store:
        rep = store.fsck(full=True)
        if not rep.ok:
            v.fsck_ok = False
            v.problems.append(f"fsck: broken={dict(list(rep.broken.items())[:3])} problems={rep.problems[:3]}")
        live = {c.id for c in store.list()}
        for cid, h in log.commits.items():
            v.acknowledged += 1
            if cid not in live and cid not in log.pruned:
                v.problems.append(f"acknowledged commit {cid[:12]} is not live and was never pruned")
            try:
                got = doc_hash(store.read(cid))
            except UnknownRevision:
                if cid in log.pruned:
                    v.pruned_ok += 1
                else:
                    v.problems.append(f"acknowledged commit {cid[:12]} is unknown")
                continue
            except CkptError as e:
                v.problems.append(f"acknowledged commit {cid[:12]}: {type(e).__name__}: {e}")
                continue
            if got != h:
                v.problems.append(f"acknowledged commit {cid[:12]} restored WRONG data")
            elif cid in log.pruned:
                v.pruned_ok += 1
            else:
                v.restorable += 1
        for b, tip in store.branches().items():
            try:
                store.read(tip)
            except CkptError as e:
                v.problems.append(f"branch {b} tip unreadable: {e}")
    return v


@dataclasses.dataclass
class CrashFigures:
    """Totals of a crash run."""

    trials: int = 0
    kills: int = 0
    acknowledged: int = 0
    restorable: int = 0
    pruned: int = 0
    corrupt_stores: int = 0
    kills_by_op: dict[str, int] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)


def _acks_since(acks: Path, offset: int) -> int:
    """Acknowledged commits (complete ``C`` lines) appended to ``acks`` after byte ``offset``."""
    try:
        with acks.open("rb") as f:
            f.seek(offset)
            tail = f.read()
    except FileNotFoundError:
        return 0
    return sum(1 for ln in tail.split(b"\n")[:-1] if ln.startswith(b"C "))


def crash_run(work: Path, trials: int, seed: int = 1, max_delay_s: float = 0.8,
              trials_per_store: int = 10, min_acks: int = 1) -> CrashFigures:
    """Run ``trials`` writer processes, each SIGKILLed at a random moment, verifying the store after each.

    A store lives for ``trials_per_store`` trials (later writers restart on what the killed ones left) and
    then a new one starts, so recovery is tested on crashed-over state without the store growing unboundedly.
    Each writer is killed only after it acknowledged between ``min_acks`` and ``2 * min_acks`` commits.
    """
    rng = random.Random(seed)
    fig = CrashFigures()
    fixtures = copy_fixtures(work / "fixtures")
    store_path = acks = None
    for t in range(trials):
        if t % trials_per_store == 0:
            store_path = work / f"store{t}"
            Store.init(store_path).close()
            acks = work / f"acks{t}"
        assert store_path is not None and acks is not None
        before = acks.stat().st_size if acks.exists() else 0
        p = spawn("writer", str(store_path), str(acks), str(seed * 100_000 + t), str(fixtures),
                  errors=work / "errors")
        # Kill only after this writer acknowledged `target` commits (a condition, not a wall-clock guess, so
        # the totals do not depend on machine speed), then at a random moment within max_delay_s.
        target = rng.randint(min_acks, 2 * min_acks)
        deadline = time.monotonic() + 120
        while _acks_since(acks, before) < target and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0, max_delay_s))
        fig.trials += 1
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            fig.kills += 1
        _, err = p.communicate()
        if p.returncode != -signal.SIGKILL:
            fig.problems.append(f"trial {t}: writer exited {p.returncode}: {err.decode()[-2000:]}")
        log = AckLog.read(acks)
        if log.ops:
            last = log.ops[-1]
            fig.kills_by_op[last] = fig.kills_by_op.get(last, 0) + 1
        v = verify(store_path, log)
        if not v.fsck_ok or v.problems:
            fig.corrupt_stores += 1
            fig.problems += [f"trial {t}: {p}" for p in v.problems]
        if (t + 1) % trials_per_store == 0 or t == trials - 1:
            fig.acknowledged += v.acknowledged
            fig.restorable += v.restorable
            fig.pruned += v.pruned_ok
    return fig


@dataclasses.dataclass
class ConcurrencyFigures:
    """Totals of a concurrency run."""

    processes: int = 0
    commits_each: int = 0
    acknowledged: int = 0
    restorable: int = 0
    pruned: int = 0
    lost: int = 0
    errors: int = 0
    maint_rounds: int = 0
    gc_busy: int = 0  # explicit gc refused (GcBusy) because a writer's automatic repack held the lock
    seconds: float = 0.0
    problems: list[str] = dataclasses.field(default_factory=list)


def concurrency_run(work: Path, processes: int, commits: int, gc: bool = True) -> ConcurrencyFigures:
    """``processes`` writers x ``commits`` commits (half on their own branch, half on ``shared``) while a
    maintenance process prunes and collects; then every acknowledged commit is checked and the shared
    branch must be one linear chain holding every commit made on it (no lost ref update)."""
    fig = ConcurrencyFigures(processes=processes, commits_each=commits)
    store_path = work / "store"
    Store.init(store_path).close()
    errors = work / "errors"
    stop = work / "stop"
    t0 = time.monotonic()
    ws = [spawn("worker", str(store_path), str(work / f"acks{i}"), str(i), str(commits), "shared",
                errors=errors) for i in range(processes)]
    m = spawn("maint", str(store_path), str(work / "acks-maint"), str(stop), errors=errors) if gc else None
    outs = [w.communicate()[1] for w in ws]
    stop.touch()
    if m is not None:
        outs.append(m.communicate()[1])
    fig.seconds = time.monotonic() - t0
    for p, err in zip([*ws, *([m] if m else [])], outs):
        if p.returncode != 0:
            fig.errors += 1
            fig.problems.append(f"process exited {p.returncode}: {err.decode()[-1500:]}")
        if b"locked" in err:
            fig.problems.append("'database is locked' reached a process")
    log = AckLog.read(*[work / f"acks{i}" for i in range(processes)], work / "acks-maint")
    fig.maint_rounds = sum(int(o.split()[1]) for o in log.ops if o.startswith("rounds"))
    fig.gc_busy = sum(int(o.split()[1]) for o in log.ops if o.startswith("busy"))
    v = verify(store_path, log)
    fig.acknowledged, fig.restorable, fig.pruned = v.acknowledged, v.restorable, v.pruned_ok
    fig.problems += v.problems
    fig.lost = sum(1 for p in v.problems if "not live" in p or "unknown" in p or "WRONG" in p)
    expected = processes * commits
    if fig.acknowledged != expected:
        fig.problems.append(f"{fig.acknowledged} commits acknowledged, {expected} expected")
    with Store.open(store_path) as store:
        shared = [c for c in log.commits if c not in log.pruned or store.backend.has_many([bytes.fromhex(c)])]
        parents: dict[str, str | None] = {}
        for cid in shared:
            try:
                info = store.info(cid)
            except CkptError:
                continue
            if info.branch == "shared":
                parents[cid] = info.parents[0] if info.parents else None
        firsts = [p for p in parents.values()]
        dup = len(firsts) - len(set(firsts))
        if dup:
            fig.problems.append(f"shared branch: {dup} commits share a parent (a lost ref update)")
    return fig


@dataclasses.dataclass
class DiskFullFigures:
    """Totals of a disk-full run: writes refused, and what a refused write left behind."""

    method: str = ""
    attempts: int = 0
    refused_cleanly: int = 0  # StoreWriteError, one line
    fitted: int = 0  # the write found enough space after all and succeeded
    heads_moved: int = 0
    leftover_files: int = 0
    fsck_failures: int = 0
    recovered: int = 0  # a write after freeing space succeeded and restores exactly
    problems: list[str] = dataclasses.field(default_factory=list)


def disk_full_run(work: Path, trials: int, seed: int = 4) -> DiskFullFigures:
    """Fill a small tmpfs (root) around a store, try commits, gc and imports of random sizes, then check
    the error, the heads, the folder, fsck, and that the store works again once space is back."""
    from crewckpt.backends.base import StoreWriteError
    rng = random.Random(seed)
    fig = DiskFullFigures(method="tmpfs")
    mnt = work / "mnt"
    mnt.mkdir(parents=True, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True,
                      check=False).returncode:
        fig.method = "unavailable (needs root for a tmpfs)"
        return fig
    fixtures = copy_fixtures(work / "fixtures")
    try:
        for t in range(trials):
            sp = mnt / f"s{t}"
            store = Store.init(sp)
            for i in range(rng.randint(1, 5)):
                store.commit(make_doc(rng, i, "main"))
            heads = store.branches()
            filler = mnt / "filler"
            fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
            with contextlib_suppress(OSError):
                while True:
                    os.write(fd, b"\0" * 65536)
            os.close(fd)
            os.truncate(filler, max(0, filler.stat().st_size - rng.choice([0, 4096, 65536, 400_000])))
            op = rng.choice(["commit", "commit", "import", "gc"])
            fig.attempts += 1
            refused = False
            try:
                if op == "commit":
                    store.commit({"big": rng.randbytes(rng.choice([100_000, 2_000_000, 9_000_000])).hex()})
                elif op == "import":
                    store_import(store, fixtures / rng.choice(IMPORT_FIXTURES))
                else:
                    store.commit({"pad": rng.randbytes(50_000).hex()})
                    store.gc()
                fig.fitted += 1  # there was room after all: it must then be stored correctly (fsck below)
            except StoreWriteError as e:
                refused = True
                if "\n" not in str(e):
                    fig.refused_cleanly += 1
            except BaseException as e:  # noqa: BLE001 - anything else reaching the user is a finding
                fig.problems.append(f"trial {t}: {op}: {type(e).__module__}.{type(e).__name__}: {e}")
            if refused and op == "commit" and store.branches() != heads:  # a partial import may move them
                fig.heads_moved += 1
            stray = [p.name for p in sp.iterdir() if p.name not in STORE_FILES]
            fig.leftover_files += len(stray)
            if not store.fsck(full=True).ok:
                fig.fsck_failures += 1
            filler.unlink()
            doc = make_doc(rng, 99, "after")
            cid = store.commit(doc)
            if doc_hash(store.read(cid)) == doc_hash(doc):
                fig.recovered += 1
            store.close()
            shutil.rmtree(sp)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
    return fig


def contextlib_suppress(*exc: type[BaseException]) -> Any:
    import contextlib
    return contextlib.suppress(*exc)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
