"""Checkpointing on every event (``on_events=["*"]``) of a research crew, four ways side by side (issue 13).

    python benchmarks/bench_crewai.py [--tasks 6 30 100] [--long] [--repeat 1] [--profile N] [--no-store]

Modes (each (mode, size) runs in its own child process after a 2-task warm-up run in that child):

* ``none``      no checkpointing: the baseline every overhead is measured against;
* ``json``      CrewAI's JsonProvider through its own listener (thread pool; lossy: some checkpoints are lost);
* ``complete``  CrewAI's complete JSON: its own ``_do_checkpoint`` (``state.model_dump`` + JsonProvider) called
                synchronously for every triggering event, i.e. every checkpoint written, as CrewAI would if its
                writer were not lossy;
* ``crewckpt``  crewckpt's CheckpointConfig.

Printed per size and mode: checkpoints written; CPU per checkpoint (thread CPU of each write: mean, median,
first 10%, last 10%); run wall and CPU (process CPU of the kickoff, every thread); the CPU overhead over ``none``; peak RSS
(the child's ``ru_maxrss``); store bytes right after the run while the process is alive (every file of the store
folder, WAL and shared-memory index included, as ``du`` counts them) and after the process exited. Then the
store-level benchmark (benchmarks/bench_store.py --growing): a growing ~1.4 MB document against orjson-to-file
and the zstd delta floor. ``--profile N`` prints a cProfile of the crewckpt writes of an N-task run.

The Done-when ratios of issue 13 are printed under the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CHILD = r"""
import cProfile, io, json, os, pstats, resource, statistics, sys, time
from pathlib import Path
from crewckpt.testing import offline_env, research_crew
from crewai.events.event_bus import CrewAIEventsBus, crewai_event_bus
from crewai.events.types.checkpoint_events import CheckpointFailedEvent
from crewai.state import checkpoint_listener as cl

mode, n_tasks, folder, profile = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1"
cpu: list[float] = []
failed: list[object] = []
crewai_event_bus.on(CheckpointFailedEvent)(lambda s, e: failed.append(e))
prof = cProfile.Profile() if profile else None


def timed(fn):
    def wrapper(*a, **k):
        t = time.thread_time()
        if prof is not None:
            prof.enable()
        try:
            return fn(*a, **k)
        finally:
            if prof is not None:
                prof.disable()
            cpu.append(time.thread_time() - t)
    return wrapper


if mode == "crewckpt":
    from crewckpt.crewai import CheckpointConfig, hooks
    hooks.install()
    hooks.write_checkpoint = timed(hooks.write_checkpoint)
elif mode in ("json", "complete"):
    from crewai.state.checkpoint_config import CheckpointConfig
    cl._do_checkpoint = timed(cl._do_checkpoint)
if mode == "complete":  # every checkpoint, synchronously on the emitting thread (no pool, none lost)
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


def config(location):
    if mode == "none":
        return None
    return CheckpointConfig(location=str(location), on_events=["*"])


def folder_bytes(p):
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0


with offline_env():
    research_crew(2, checkpoint=config(folder / "warm")).kickoff(inputs={"topic": "warm-up"})
    crewai_event_bus.flush()
    cpu.clear(); failed.clear()
    crew = research_crew(n_tasks, checkpoint=config(folder / "run"))
    wall, c0 = time.perf_counter(), time.process_time()
    crew.kickoff(inputs={"topic": "otters"})
    crewai_event_bus.flush()
    run_cpu, run_s = time.process_time() - c0, time.perf_counter() - wall
run = folder / "run"
n = len(cpu)
tenth = max(n // 10, 1)
ms = [x * 1000 for x in cpu]
out = {
    "run_s": run_s, "run_cpu": run_cpu,
    "checkpoints": n if mode != "json" else len(list(run.rglob("*.json"))),
    "failed": len(failed),
    "cpu_mean": statistics.mean(ms) if ms else 0.0,
    "cpu_median": statistics.median(ms) if ms else 0.0,
    "cpu_first": statistics.mean(ms[:tenth]) if ms else 0.0,
    "cpu_last": statistics.mean(ms[-tenth:]) if ms else 0.0,
    "cpu_total": sum(ms) / 1000,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "bytes_alive": folder_bytes(run),
}
if mode == "crewckpt":  # every checkpoint's compact JSON size: a lower bound of CrewAI's complete output
    from crewckpt.crewai.writer import open_store
    out["logical"] = open_store(run).stats()["logical_bytes"]
if prof is not None:
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats(os.environ.get("PSORT", "tottime")).print_stats(int(os.environ.get("PN", "30")))
    print(s.getvalue(), file=sys.stderr)
print(json.dumps(out))
"""

MODES = ("none", "json", "complete", "crewckpt")


def folder_bytes(p: Path) -> int:
    """Bytes of every file under ``p`` (0 when missing)."""
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0


def run_child(mode: str, n_tasks: int, profile: bool = False) -> dict[str, Any]:
    """One measured run in a fresh process; adds ``bytes_after`` (the store folder after the child exited)."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{mode}-") as folder:
        out = subprocess.run([sys.executable, "-c", CHILD, mode, str(n_tasks), folder, "1" if profile else "0"],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"bench child {mode}/{n_tasks} failed:\n{out.stderr[-3000:]}")
        if profile:
            print(out.stderr[-12000:])
        got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
        got["bytes_after"] = folder_bytes(Path(folder) / "run")
        return got


def fmt_bytes(n: float) -> str:
    """``1.4 MB`` style (powers of 1000)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return str(n)


KEYS = ("checkpoints", "failed", "cpu_mean", "cpu_median", "cpu_first", "cpu_last", "cpu_total", "run_s", "run_cpu", "rss_mb",
        "bytes_alive", "bytes_after")


def measure(sizes: list[int], repeat: int, complete_max: int,
            only: list[str] | None = None) -> dict[int, dict[str, dict[str, float]]]:
    """Medians per size and mode over ``repeat`` interleaved runs. Above ``complete_max`` tasks the complete
    JSON writer is not run (it needs minutes); its bytes are then the crewckpt documents' compact JSON size,
    a lower bound (CrewAI writes ``json.dumps`` with spaces)."""
    out: dict[int, dict[str, dict[str, float]]] = {}
    for n in sizes:
        modes = [m for m in MODES if (m != "complete" or n <= complete_max) and (not only or m in only or
                                                                                   m == "none")]
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        for _ in range(repeat):
            for mode in modes:
                runs[mode].append(run_child(mode, n))
        out[n] = {m: {k: statistics.median(r.get(k, 0) for r in rs) for k in (*KEYS, "logical")}
                  for m, rs in runs.items()}
        for m in MODES:
            if m not in out[n] and m not in ("complete", "crewckpt"):
                out[n][m] = {k: float("nan") for k in (*KEYS, "logical")}
        if "complete" not in out[n] and "crewckpt" in out[n]:
            c = out[n]["crewckpt"]
            out[n]["complete"] = {k: float("nan") for k in (*KEYS, "logical")}
            out[n]["complete"].update(checkpoints=c["checkpoints"], bytes_alive=c["logical"],
                                      bytes_after=c["logical"])
        print_size(n, out[n])
    return out


def print_size(n: int, s: dict[str, dict[str, float]]) -> None:
    """The rows of one size."""
    base = s["none"]
    for mode in MODES:
        r = s.get(mode)
        if r is None or r["checkpoints"] != r["checkpoints"]:
            continue
        if r["run_s"] != r["run_s"]:  # not run: bytes only (lower bound)
            print(f"{n:>5} {mode:<9} {r['checkpoints']:>6.0f}   (not run; bytes = the documents' compact JSON, a lower "
                  f"bound)  {fmt_bytes(r['bytes_alive']):>10} {fmt_bytes(r['bytes_after']):>10}")
            continue
        over = r["run_cpu"] - base["run_cpu"]
        print(f"{n:>5} {mode:<9} {r['checkpoints']:>6.0f} {r['cpu_mean']:>8.2f} {r['cpu_median']:>8.2f} "
              f"{r['cpu_first']:>8.2f} "
              f"{r['cpu_last']:>8.2f} {r['run_s']:>7.2f} {r['run_cpu']:>7.2f} {over:>7.2f} {r['rss_mb']:>7.0f} "
              f"{fmt_bytes(r['bytes_alive']):>10} {fmt_bytes(r['bytes_after']):>10}", flush=True)


def done_when(res: dict[int, dict[str, dict[str, float]]]) -> None:
    """Issue 13's Done-when ratios that this benchmark measures."""
    print("\nDone-when (issue 13), crewckpt:")
    sizes = sorted(res)
    lo, hi = sizes[0], sizes[-1]
    c_lo, c_hi = res[lo]["crewckpt"], res[hi]["crewckpt"]
    print(f"  CPU/checkpoint N={hi} vs N={lo}: {c_hi['cpu_mean'] / c_lo['cpu_mean']:.2f}x of the means (target "
          f"<= 1.5x); {c_hi['cpu_median'] / c_lo['cpu_median']:.2f}x of the medians (a short run's mean moves "
          f"with where its few garbage collections and its first checkpoint's checks land)")
    for n in sizes:
        c, b, j = res[n]["crewckpt"], res[n]["none"], res[n]["complete"]
        over = c["run_cpu"] - b["run_cpu"]
        print(f"  N={n}: last/first 10% {c['cpu_last'] / c['cpu_first']:.2f}x (<= 1.3x); CPU overhead "
              f"{over / b['run_cpu']:.2f}x the run (<= 1x at 100); RSS {c['rss_mb'] / b['rss_mb']:.2f}x (<= 1.25x "
              f"at 100); bytes vs complete JSON: alive {j['bytes_after'] / max(c['bytes_alive'], 1):.0f}x, after "
              f"exit {j['bytes_after'] / max(c['bytes_after'], 1):.0f}x (6: >= 50x / 80x; 100: >= 1000x)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[6, 30, 100])
    parser.add_argument("--long", action="store_true", help="also N=300")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--complete-max", type=int, default=30, metavar="N",
                        help="run the complete JSON writer up to N tasks (default 30; it is quadratic)")
    parser.add_argument("--profile", type=int, metavar="N", help="only print a cProfile of crewckpt's writes, N tasks")
    parser.add_argument("--modes", nargs="+", choices=MODES, help="only these modes (and none)")
    parser.add_argument("--no-store", action="store_true", help="skip the store-level benchmark")
    args = parser.parse_args(argv)
    if args.profile:
        r = run_child("crewckpt", args.profile, profile=True)
        print(json.dumps(r))
        return 0
    sizes = sorted(set(args.tasks + ([300] if args.long else [])))
    print(f"{'tasks':>5} {'mode':<9} {'ckpts':>6} {'cpu ms':>8} {'median':>8} {'first':>8} {'last':>8} {'wall s':>7} "
          f"{'cpu s':>7} {'over s':>7} {'rss MB':>7} {'alive':>10} {'exited':>10}")
    res = measure(sizes, args.repeat, args.complete_max, args.modes)
    if all("crewckpt" in r and "complete" in r for r in res.values()):
        done_when(res)
    if not args.no_store:
        print()
        sys.stdout.flush()
        here = Path(__file__).resolve().parent
        subprocess.run([sys.executable, str(here / "bench_store.py"), "--growing"], check=True,
                       env={**os.environ, "PYTHONPATH": str(here.parent)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
