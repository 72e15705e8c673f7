"""Fleet benchmark at the store level: W writer processes, each committing a growing checkpoint document
step by step to its own branch, into ONE PostgreSQL store (a throwaway local server, default durability:
fsync on, synchronous_commit on) and, side by side, into one SQLite store per worker (what a fleet without a
shared store does). Printed: checkpoints per second in total, p50/p99 write latency, bytes stored
(PostgreSQL: ``pg_total_relation_size`` of the store's tables; SQLite: the files), round trips per
checkpoint, client CPU per checkpoint, and lost = acknowledged checkpoints not readable afterwards (must be 0).
Beside them, ``memory``: the same writer processes with an in-memory store (their CPU work without storage),
whose 1-to-W ratio is the ceiling this machine's cores put on any CPU-bound fleet.

    python benchmarks/bench_postgres.py [--writers 1,4,8] [--steps 60]

Needs the PostgreSQL server binaries (tests/pg_server.py finds them) and ``pip install -e '.[postgres]'``.
On a 2-core machine shared with other work, read the ratios, not the absolute figures.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))  # pg_server: the test suite's throwaway server


def doc(worker: int, step: int) -> dict[str, Any]:
    """A CrewAI-shaped state that grows by one event per step; the crew and agents repeat across workers."""
    return {"crew": {"name": "research crew", "agents": [{"role": f"agent {a}", "goal": "find facts " * 20}
                                                         for a in range(3)]},
            "worker": worker,
            "tasks": [{"description": f"task {t} " * 30, "output": f"output {t} " * 40 if t < step // 6 else None}
                      for t in range(6)],
            "events": [{"id": f"ev-{worker}-{i}", "type": "agent_logs_execution", "text": f"step {i} " * 25}
                       for i in range(step)]}


def _writer(args: tuple[str, str, int, int, Any]) -> tuple[list[float], float, float, list[str], int, float]:
    kind, location, worker, steps, barrier = args
    from crewckpt.history.store import Store
    backend: Any = None
    if kind == "postgres":
        from crewckpt.backends.postgres import PgBackend
        backend = PgBackend.open(location)
        store = Store(backend, None)
    elif kind == "memory":  # the same CPU work (split, hash, compress) without any storage: the ceiling
        store = Store.memory()
    else:
        store = Store.open(location)
    docs = [doc(worker, step) for step in range(steps)]
    lat, ids = [], []
    barrier.wait()  # every worker starts together (spawned processes take seconds to import)
    c0 = time.process_time()
    t0 = time.time()
    for d in docs:
        s = time.perf_counter()
        ids.append(store.commit(d, branch=f"w{worker}", run_id=f"w{worker}"))
        lat.append(time.perf_counter() - s)
    t1 = time.time()
    cpu = time.process_time() - c0
    rt = backend.round_trips if backend is not None else 0
    store.close()
    return lat, t0, t1, ids, rt, cpu


def run(kind: str, locations: list[str], steps: int) -> dict[str, float]:
    """``len(locations)`` writer processes at once; rate (all writers), latency, round trips and client CPU
    per checkpoint."""
    ctx = mp.get_context("spawn")
    with ctx.Manager() as m, ctx.Pool(len(locations)) as pool:
        barrier = m.Barrier(len(locations))
        results = pool.map(_writer, [(kind, loc, w, steps, barrier) for w, loc in enumerate(locations)])
    lat = sorted(x for r in results for x in r[0])
    wall = max(r[2] for r in results) - min(r[1] for r in results)
    n = len(lat)
    return {"rate": n / wall, "p50": lat[n // 2] * 1e3, "p99": lat[min(n - 1, int(n * 0.99))] * 1e3,
            "rt": sum(r[4] for r in results) / n, "cpu": sum(r[5] for r in results) / n * 1e3,
            "ids": [i for r in results for i in r[3]]}  # type: ignore[dict-item]


def lost(store: Any, ids: list[str], steps: int, offset: int = 0) -> int:
    """Acknowledged checkpoints (``ids``: worker by worker, from global index ``offset``) that do not read
    back as written."""
    bad = 0
    for k, cid in enumerate(ids, start=offset):
        try:
            if store.read(cid) != doc(k // steps, k % steps):
                bad += 1
        except Exception:  # noqa: BLE001 - counted
            bad += 1
    return bad


def _table_bytes(url: str, tables: list[str]) -> int:
    import psycopg
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT coalesce(sum(pg_total_relation_size(t::regclass)), 0) FROM unnest(%s::text[]) t",
                        (tables,)).fetchone()
    return int(row[0]) if row else 0


def versus_langgraph(srv_url: str, steps: int) -> None:
    """crewckpt's PostgreSQL backend vs langgraph-checkpoint-postgres's PostgresSaver on the same server: the
    same sequence of states (benchmarks/growing_doc.py: a CrewAI-shaped document growing by one event per
    step; its top-level keys are the LangGraph channels), step by step, one thread/branch. PostgresSaver writes a channel's value again
    whenever it changed (here: the growing event list every step); crewckpt stores what is new."""
    try:
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError:
        print("(PostgresSaver comparison skipped: pip install langgraph-checkpoint-postgres)")
        return
    import psycopg
    from growing_doc import Growing, _plain  # issue 13's CrewAI-shaped growing document (~1.3 KB per event)

    from crewckpt.backends.postgres import PgBackend
    from crewckpt.format import objects as ob
    from crewckpt.history.store import Store

    with psycopg.connect(srv_url, autocommit=True) as c:
        c.execute("CREATE DATABASE langgraph")
    lg_url = srv_url.rsplit("/", 1)[0] + "/langgraph"
    g = Growing(frozen=False, n_tasks=max(1, steps // 6))
    states = []
    for i in range(steps):
        g.step(i)
        states.append(_plain(g.doc))
    with PostgresSaver.from_conn_string(lg_url) as saver:
        saver.setup()
        config: Any = {"configurable": {"thread_id": "t0", "checkpoint_ns": ""}}
        versions: dict[str, Any] = {}
        prev: dict[str, Any] = {}
        t = time.perf_counter()
        for step, state in enumerate(states):
            ckpt = empty_checkpoint()
            changed = {}
            for ch, val in state.items():
                if prev.get(ch) != val:
                    versions[ch] = saver.get_next_version(versions.get(ch), None)
                    changed[ch] = versions[ch]
            ckpt["channel_values"] = dict(state)
            ckpt["channel_versions"] = dict(versions)
            config = saver.put(config, ckpt, {"step": step}, changed)  # type: ignore[arg-type]
            prev = state
        lg_rate = steps / (time.perf_counter() - t)
    lg_bytes = _table_bytes(lg_url, ["checkpoints", "checkpoint_blobs", "checkpoint_writes", "checkpoint_migrations"])
    url = f"{srv_url}?schema=versus"
    b = PgBackend.create(url, {"format_version": str(ob.FORMAT_VERSION), "gc_epoch": "0"}, gc_grace_s=0)
    store = Store(b, None)
    t = time.perf_counter()
    for state in states:
        store.commit(state, branch="t0", run_id="t0")
    ck_rate = steps / (time.perf_counter() - t)
    ck_bytes = b.disk_bytes()
    store.gc()  # merges the per-checkpoint packs' leftovers away; VACUUM FULL on a small store
    gc_bytes = b.disk_bytes()
    b.close()
    print(f"\nsame {steps} growing states, one thread, same server: bytes in the database / writes per second")
    print(f"  PostgresSaver (langgraph-checkpoint-postgres): {lg_bytes:>12,} B  {lg_rate:7.1f}/s")
    print(f"  crewckpt PostgreSQL backend, as written:       {ck_bytes:>12,} B  {ck_rate:7.1f}/s  "
          f"({lg_bytes / max(ck_bytes, 1):.1f}x fewer bytes)")
    print(f"  crewckpt PostgreSQL backend, after ckpt gc:    {gc_bytes:>12,} B             "
          f"({lg_bytes / max(gc_bytes, 1):.1f}x fewer bytes)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writers", default="1,4,8")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--versus-steps", type=int, default=300, help="states in the PostgresSaver comparison (0: skip)")
    a = ap.parse_args()
    import pg_server

    from crewckpt.backends.postgres import PgBackend
    from crewckpt.format import objects as ob
    from crewckpt.history.store import Store

    bindir = pg_server.find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL server binaries found (see tests/pg_server.py)")
    srv = pg_server.PgServer.start(bindir, settings={})  # default durability: fsync and synchronous_commit on
    print(f"{a.steps} growing checkpoints per writer; PostgreSQL 1 store on a local server; SQLite 1 file per writer")
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"{'writers':>7} {'store':<10} {'ckpt/s':>8} {'x of 1':>7} {'p50 ms':>8} {'p99 ms':>8} {'bytes':>12} "
          f"{'RT/ckpt':>8} {'CPU ms':>7} {'lost':>5}")
    base: dict[str, float] = {}

    def row(w: int, kind: str, r: dict[str, Any], size: str, rt: str, n_lost: int) -> None:
        base.setdefault(kind, r["rate"])
        print(f"{w:>7} {kind:<10} {r['rate']:>8.1f} {r['rate'] / base[kind]:>6.2f}x {r['p50']:>8.1f} "
              f"{r['p99']:>8.1f} {size:>12} {rt:>8} {r['cpu']:>7.1f} {n_lost:>5}", flush=True)

    try:
        for w in (int(x) for x in a.writers.split(",") if x):
            url = f"{srv.url}?schema=bench{w}"
            PgBackend.create(url, {"format_version": str(ob.FORMAT_VERSION), "gc_epoch": "0"}).close()
            r = run("postgres", [url] * w, a.steps)
            b = PgBackend.open(url)
            pg_lost = lost(Store(b, None), r["ids"], a.steps)  # type: ignore[arg-type]
            size = b.disk_bytes()
            b.close()
            row(w, "postgres", r, f"{size:,}", f"{r['rt']:.1f}", pg_lost)
            with tempfile.TemporaryDirectory() as tmp:
                paths = []
                for k in range(w):
                    p = os.path.join(tmp, f"s{k}")
                    Store.init(p).close()
                    paths.append(p)
                r = run("sqlite", paths, a.steps)
                sq_lost = 0
                for k, p in enumerate(paths):
                    with Store.open(p) as s:
                        sq_lost += lost(s, r["ids"][k * a.steps:(k + 1) * a.steps], a.steps,  # type: ignore[index]
                                        k * a.steps)
                size = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
            row(w, "sqlite", r, f"{size:,}", "-", sq_lost)
            r = run("memory", [""] * w, a.steps)
            row(w, "memory", r, "-", "-", 0)
        print("memory: the same writers with an in-memory store (no storage: their CPU work only); its 'x of 1' "
              "is what this machine's cores allow CPU-bound writers")
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        if a.versus_steps:
            versus_langgraph(srv.url, a.versus_steps)
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
