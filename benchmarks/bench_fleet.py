"""Fleet benchmark (issue 15): W worker processes run the same ``"*"`` CrewAI research crew (ScriptedLLM, no
network) at once, each checkpointing every event, four ways side by side:

* ``postgres``  crewckpt, every worker into ONE PostgreSQL store (a local server this script starts, default
                durability: fsync and synchronous_commit on);
* ``sqlite``    crewckpt, one SQLite store (a folder) per worker: what a fleet without a shared store does;
* ``json``      CrewAI's own JsonProvider, one folder per worker, its ``_do_checkpoint`` called synchronously
                for every triggering event (CrewAI's listener pool drops checkpoints under load; this writes
                each one, as bench_crewai.py's ``complete`` mode);
* ``memory``    crewckpt into a per-process in-memory store: the workers' CPU work (crew, document, split,
                hash, compress) without any storage. Its W-vs-1 ratio is what this machine's cores allow a
                CPU-bound fleet; printed beside the others as the ceiling.

    python benchmarks/bench_fleet.py [--writers 1,4,8] [--tasks 3] [--modes postgres,sqlite,json,memory]

Printed per (writers, mode): checkpoints per second in total (all workers; from the first worker's start to
the last one's end, workers start together), p50/p99 latency of one checkpoint write, bytes stored
(PostgreSQL: ``pg_total_relation_size`` of the store's tables; others: the files), and lost = acknowledged
checkpoints not found in the store afterwards (must be 0). Then, per checkpoint: one worker's wall time,
client CPU (the worker process; of it, inside the checkpoint call), server CPU (every PostgreSQL process),
round trips, WAL flushes (count, time) and the time runnable but waiting for a core; and from the 1-writer
rows the best W-to-1 rate ratio this machine's cores allow: cores x (CPU + idle) / CPU per checkpoint.
Run it on an otherwise idle machine: on a shared one the rates and ratios follow the other tenants' load;
the CPU per checkpoint does not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # pg_server: the test suite's throwaway server

CHILD = r"""
import json, os, sys, time
from pathlib import Path
mode, loc, n_tasks, go, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5]
from crewckpt.testing import offline_env, research_crew
from crewai.events.event_bus import CrewAIEventsBus, crewai_event_bus
from crewai.state import checkpoint_listener as cl

lat, acked, inside = [], [0], [0.0]

def timed(fn, count):
    def wrapper(*a, **k):
        t, c = time.perf_counter(), time.thread_time()
        r = fn(*a, **k)
        lat.append(time.perf_counter() - t)
        inside[0] += time.thread_time() - c  # the checkpoint's own CPU (document, split, hash, store client)
        if count(r):
            acked[0] += 1
        return r
    return wrapper

def waited():  # ns this process's live threads spent runnable, waiting for a core (/proc schedstat)
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            total += int(open(f"/proc/self/task/{tid}/schedstat").read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total

if mode == "json":
    from crewai.state.checkpoint_config import CheckpointConfig
    cl._do_checkpoint = timed(cl._do_checkpoint, lambda r: True)
    should, prepare = cl._should_checkpoint, CrewAIEventsBus._prepare_event
    cl._should_checkpoint = lambda source, event: None  # CrewAI's pool listener stays idle
    skip = (cl.CheckpointBaseEvent, cl.CheckpointForkBaseEvent, cl.CheckpointRestoreBaseEvent)

    def sync_prepare(self, source, event):
        prepare(self, source, event)
        state = self._runtime_state
        if state is None or isinstance(event, skip) or cl.is_replaying():
            return
        cfg = should(source, event)
        if cfg is not None:
            cl._do_checkpoint(state, cfg, event)

    CrewAIEventsBus._prepare_event = sync_prepare
else:
    from crewckpt.crewai import CheckpointConfig, hooks
    from crewckpt.crewai.writer import open_store
    hooks.install()
    hooks.write_checkpoint = timed(hooks.write_checkpoint, lambda r: r is not None)

with offline_env():
    warm = Path(out).parent / (Path(out).stem + "-warm")
    warm_loc = str(warm) if mode == "json" else "memory:warm"
    research_crew(1, checkpoint=CheckpointConfig(location=warm_loc, on_events=["*"])).kickoff(inputs={"topic": "w"})
    crewai_event_bus.flush()
    backend = open_store(loc, create=True).backend if mode != "json" else None  # connected before the clock
    lat.clear()
    acked[0], inside[0] = 0, 0.0
    crew = research_crew(n_tasks, checkpoint=CheckpointConfig(location=loc, on_events=["*"]))
    Path(out + ".ready").touch()
    while not go.exists():
        time.sleep(0.005)
    rt0 = getattr(backend, "round_trips", 0)
    t0, c0, w0 = time.time(), time.process_time(), waited()
    crew.kickoff(inputs={"topic": "otters"})
    crewai_event_bus.flush()
    t1, c1, w1 = time.time(), time.process_time(), waited()
    rt = getattr(backend, "round_trips", 0) - rt0
Path(out + ".tmp").write_text(json.dumps({"lat": lat, "acked": acked[0], "t0": t0, "t1": t1, "cpu": c1 - c0,
                                          "inside": inside[0], "rq": (w1 - w0) / 1e9, "rt": rt}))
os.replace(out + ".tmp", out)
while not Path(str(go) + ".exit").exists():  # connections stay open until the server's CPU is read
    time.sleep(0.005)
"""


def folder_bytes(p: Path) -> int:
    """Bytes of every file under ``p`` (0 when missing)."""
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0


def server_cpu(root_pid: int | None) -> tuple[float, float]:
    """(CPU seconds, seconds runnable but waiting for a core) of the PostgreSQL server ``root_pid`` and every
    process it started (backends, WAL writer, checkpointer), from /proc; (0, 0) without a server."""
    if root_pid is None:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    cpu = wait = 0.0
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            f = stat[stat.rindex(")") + 2:].split()
            if int(p) != root_pid and int(f[1]) != root_pid:  # f[1]: the parent pid
                continue
            cpu += (int(f[11]) + int(f[12])) / tick
            wait += int(Path(f"/proc/{p}/schedstat").read_text().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            continue
    return cpu, wait


def wal_sync(url: str | None) -> tuple[int, float]:
    """(WAL flushes, ms spent in them) since the server started (pg_stat_wal; 0 without a server)."""
    if url is None:
        return 0, 0.0
    import psycopg
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT wal_sync, wal_sync_time FROM pg_stat_wal").fetchone()
    return (int(row[0]), float(row[1])) if row else (0, 0.0)


def run_fleet(mode: str, locations: list[str], n_tasks: int, tmp: Path,
              server_pid: int | None = None, server_url: str | None = None) -> dict[str, Any]:
    """W children at once (one per location), started together; their latencies, acks, wall window, and
    per checkpoint: client CPU (all of it, and inside the checkpoint call), round trips, server CPU, and
    the server's WAL flushes (count and time: waiting without using a core)."""
    go = tmp / f"go-{mode}-{len(locations)}"
    outs = [str(tmp / f"out-{mode}-{len(locations)}-{k}") for k in range(len(locations))]
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, mode, loc, str(n_tasks), str(go), out],
                              stderr=subprocess.PIPE, text=True) for loc, out in zip(locations, outs)]
    deadline = time.monotonic() + 600
    while not all(Path(o + ".ready").exists() for o in outs):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            errs = [p.communicate()[1][-2000:] for p in procs if p.poll() is not None]
            raise SystemExit(f"a {mode} worker did not get ready:\n{errs}")
        time.sleep(0.02)
    s0, f0 = server_cpu(server_pid), wal_sync(server_url)
    go.touch()
    deadline = time.monotonic() + 1800
    while not all(Path(o).exists() for o in outs):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            break  # a worker died: its error is reported below
        time.sleep(0.02)
    s1 = server_cpu(server_pid)  # before the workers exit: their server sessions (and CPU) are still there
    Path(str(go) + ".exit").touch()
    for p in procs:
        _, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise SystemExit(f"a {mode} worker failed:\n{err[-3000:]}")
    f1 = wal_sync(server_url)  # after: a session reports its WAL statistics at most once a second, and at exit
    res = [json.loads(Path(o).read_text()) for o in outs]
    lat = sorted(x for r in res for x in r["lat"])
    n = len(lat)
    wall = max(r["t1"] for r in res) - min(r["t0"] for r in res)
    per = 1e3 / max(n, 1)  # ms per checkpoint

    def tot(k: str) -> float:
        return float(sum(r[k] for r in res))

    return {"rate": sum(r["acked"] for r in res) / wall, "p50": lat[n // 2] * 1e3,
            "p99": lat[min(n - 1, int(n * 0.99))] * 1e3, "acked": sum(r["acked"] for r in res), "calls": n,
            "wall_ms": sum(r["t1"] - r["t0"] for r in res) * per, "cpu_ms": tot("cpu") * per,
            "inside_ms": tot("inside") * per, "rq_ms": (tot("rq") + s1[1] - s0[1]) * per,
            "server_ms": (s1[0] - s0[0]) * per, "rt": tot("rt") / max(n, 1),
            "syncs": (f1[0] - f0[0]) / max(n, 1), "sync_ms": (f1[1] - f0[1]) / max(n, 1)}


def count_commits(location: str) -> int:
    """Commits in the store at ``location`` (every one the workers acknowledged must be there)."""
    from crewckpt.history.store import Store
    with Store.open(location) as s:
        return len(s.backend.index_rows())


def where_time_goes(profiles: list[tuple[int, str, dict[str, Any]]], modes: list[str]) -> None:
    """Per checkpoint: one worker's wall time; the CPU it costs (client: the whole worker process, of which
    inside the checkpoint call: document, split, hash, store client; the rest is CrewAI's run; server: every
    PostgreSQL process); round trips; the server's WAL flushes (count, ms: waiting without a core). Then
    the best W-writer to 1-writer rate ratio this machine's cores allow: one writer alone takes busy + WAL
    ms per checkpoint (its idle part is the flush), W writers at best keep every core busy (group commit
    shares the flushes): ratio <= cores x (busy + WAL) / busy, and <= W."""
    cores = os.cpu_count() or 1
    print("\nper checkpoint, ms (wall: of one worker; client/server: CPU; WAL: flush time, shared by writers):")
    print(f"{'writers':>7} {'store':<26} {'wall':>7} {'client':>7} {'in ckpt':>7} {'server':>7} {'RT':>5} "
          f"{'flushes':>7} {'WAL ms':>7} {'queued':>7}")
    ones: dict[str, dict[str, Any]] = {}
    for w, label, r in profiles:
        if w == 1:
            ones[label] = r
        print(f"{w:>7} {label:<26} {r['wall_ms']:>7.1f} {r['cpu_ms']:>7.1f} {r['inside_ms']:>7.1f} "
              f"{r['server_ms']:>7.1f} {r['rt']:>5.1f} {r['syncs']:>7.2f} {r['sync_ms']:>7.2f} {r['rq_ms']:>7.1f}")
    print("(queued: summed over threads and server processes, ms runnable but waiting for a core: the load of "
          "this machine, overlapping)")
    for label, r in ones.items():
        busy = r["cpu_ms"] + r["server_ms"]
        alone = busy + r["sync_ms"]
        print(f"ceiling {label}: one writer alone {alone:.1f} ms per checkpoint = {busy:.1f} ms CPU + "
              f"{r['sync_ms']:.1f} ms idle ({r['sync_ms'] / alone:.0%}); {cores} cores x {alone:.1f} / {busy:.1f} "
              f"= {cores * alone / busy if busy else float('inf'):.2f}x one writer's rate at best")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writers", default="1,4,8")
    ap.add_argument("--tasks", type=int, default=3, help="tasks of each worker's crew")
    ap.add_argument("--modes", default="postgres,sqlite,json,memory")
    a = ap.parse_args()
    modes = a.modes.split(",")
    srv = None
    if "postgres" in modes:
        import pg_server
        bindir = pg_server.find_bindir()
        if bindir is None:
            raise SystemExit("no PostgreSQL server binaries found (see tests/pg_server.py)")
        # default durability; track_wal_io_timing only times the WAL writes and flushes (pg_stat_wal)
        srv = pg_server.PgServer.start(bindir, settings={"track_wal_io_timing": "on"})
    print(f"each worker: a {a.tasks}-task research crew, on_events=['*']; load average before: "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"{'writers':>7} {'store':<26} {'ckpt/s':>8} {'x of 1':>7} {'p50 ms':>8} {'p99 ms':>8} {'bytes':>12} "
          f"{'lost':>5} {'failed':>6}")
    base: dict[str, float] = {}
    profiles: list[tuple[int, str, dict[str, Any]]] = []
    try:
        for w in (int(x) for x in a.writers.split(",")):
            for mode in modes:
                with tempfile.TemporaryDirectory(prefix=f"fleet-{mode}-{w}-") as t:
                    tmp = Path(t)
                    if mode == "postgres":
                        assert srv is not None
                        locs = [f"{srv.url}?schema=fleet{w}"] * w
                    elif mode == "memory":
                        locs = ["memory:fleet"] * w
                    else:
                        locs = [str(tmp / f"w{k}" / (".ckpt" if mode == "sqlite" else "json")) for k in range(w)]
                    pid = srv.proc.pid if mode == "postgres" and srv is not None and srv.proc else None
                    r = run_fleet(mode, locs, a.tasks, tmp, server_pid=pid,
                                  server_url=srv.url if mode == "postgres" and srv is not None else None)
                    if mode == "postgres":
                        from crewckpt.backends.postgres import PgBackend
                        b = PgBackend.open(locs[0])
                        size = b.disk_bytes()
                        b.close()
                        found = count_commits(locs[0])
                    elif mode == "sqlite":
                        size = sum(folder_bytes(Path(p)) for p in locs)
                        found = sum(count_commits(p) for p in locs)
                    elif mode == "json":
                        size = sum(folder_bytes(Path(p)) for p in locs)
                        found = sum(len(list(Path(p).rglob("*.json"))) for p in locs)
                    else:
                        size, found = 0, r["acked"]
                    # json: every call must leave a file; crewckpt: every acknowledged commit must be there, and
                    # a failed (unacknowledged) best-effort write is counted apart
                    lost = r["calls"] - found if mode == "json" else max(0, r["acked"] - found)
                    failed = 0 if mode == "json" else r["calls"] - r["acked"]
                base.setdefault(mode, r["rate"])
                label = {"postgres": "crewckpt PostgreSQL (1 db)", "sqlite": "crewckpt SQLite (1/worker)",
                         "json": "CrewAI JsonProvider (1/wk)", "memory": "crewckpt memory (CPU only)"}[mode]
                shown = f"{size:,}" if mode != "memory" else "-"
                print(f"{w:>7} {label:<26} {r['rate']:>8.1f} {r['rate'] / base[mode]:>6.2f}x {r['p50']:>8.1f} "
                      f"{r['p99']:>8.1f} {shown:>12} {lost:>5} {failed:>6}", flush=True)
                profiles.append((w, label, r))
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        where_time_goes(profiles, modes)
    finally:
        if srv is not None:
            srv.stop()


if __name__ == "__main__":
    main()
