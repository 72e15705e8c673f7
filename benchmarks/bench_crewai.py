"""CrewAI's JsonProvider vs crewckpt on the same ``on_events=["*"]`` research crew, side by side.

    python benchmarks/bench_crewai.py [--tasks 6 30] [--repeat 3]

Each (mode, size) runs in its own child process (one process tree, alternating modes, after a warm-up run
in each child) so neither side inherits the other's caches. Printed per size: checkpoints written, total
bytes on disk (crewckpt: the store folder after its handle is closed; JSON: the files), run wall time
(median of --repeat runs), and the write time of the first and the last checkpoint (CrewAI's own
``CheckpointCompletedEvent.duration_ms``). Targets (issue 4): >= 100x fewer bytes at 30 tasks; run wall time
not slower than JsonProvider.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from typing import Any

CHILD = r"""
import json, sys, tempfile, time
from pathlib import Path
from crewckpt.testing import offline_env, research_crew
from crewai.events.event_bus import crewai_event_bus
from crewai.events.types.checkpoint_events import CheckpointCompletedEvent, CheckpointFailedEvent

mode, n_tasks, folder = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
completed, failed = [], []
crewai_event_bus.on(CheckpointCompletedEvent)(lambda s, e: completed.append(e))
crewai_event_bus.on(CheckpointFailedEvent)(lambda s, e: failed.append(e))

def config(location):
    if mode == "crewckpt":
        from crewckpt.crewai import CheckpointConfig
    else:
        from crewai.state.checkpoint_config import CheckpointConfig
    return CheckpointConfig(location=str(location), on_events=["*"])

with offline_env():
    research_crew(2, checkpoint=config(folder / "warm")).kickoff(inputs={"topic": "warm-up"})
    crewai_event_bus.flush()
    completed.clear(); failed.clear()
    crew = research_crew(n_tasks, checkpoint=config(folder / "run"))
    start = time.perf_counter()
    crew.kickoff(inputs={"topic": "otters"})
    run_s = time.perf_counter() - start
    crewai_event_bus.flush()
if mode == "crewckpt":
    from crewckpt.crewai.writer import forget_stores
    forget_stores()
files = [p for p in (folder / "run").rglob("*") if p.is_file()]
events = sorted(completed, key=lambda e: e.timestamp)
print(json.dumps({
    "run_s": run_s,
    "checkpoints": len(events) if mode == "crewckpt" else len(list((folder / "run").rglob("*.json"))),
    "failed": len(failed),
    "bytes": sum(p.stat().st_size for p in files),
    "first_ms": events[0].duration_ms if events else None,
    "last_ms": events[-1].duration_ms if events else None,
}))
"""


def run_child(mode: str, n_tasks: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"bench-{mode}-") as folder:
        out = subprocess.run([sys.executable, "-c", CHILD, mode, str(n_tasks), folder], capture_output=True,
                             text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"bench child {mode}/{n_tasks} failed:\n{out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return str(n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[6, 30])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{'tasks':>5} {'mode':<9} {'ckpts':>5} {'failed':>6} {'bytes':>10} {'run s':>7} "
          f"{'first ms':>9} {'last ms':>8}")
    for n in args.tasks:
        results: dict[str, list[dict[str, Any]]] = {"json": [], "crewckpt": []}
        for _ in range(args.repeat):
            for mode in ("json", "crewckpt"):
                results[mode].append(run_child(mode, n))
        summary = {}
        for mode, runs in results.items():
            med = {k: statistics.median(r[k] for r in runs) for k in ("run_s", "bytes", "first_ms", "last_ms",
                                                                         "checkpoints", "failed")}
            summary[mode] = med
            print(f"{n:>5} {mode:<9} {med['checkpoints']:>5.0f} {med['failed']:>6.0f} {fmt_bytes(med['bytes']):>10} "
                  f"{med['run_s']:>7.3f} {med['first_ms']:>9.1f} {med['last_ms']:>8.1f}")
        j, c = summary["json"], summary["crewckpt"]
        print(f"{n:>5} ratio     bytes {j['bytes'] / c['bytes']:.0f}x fewer with crewckpt; run time "
              f"{c['run_s'] / j['run_s']:.2f}x JsonProvider's; last write {c['last_ms']:.1f} vs "
              f"{j['last_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
