"""Long runs of the reliability suites (issue 8); prints a table of figures.

    python scripts/reliability.py                 # the full run (~10-15 min on 2 cores)
    python scripts/reliability.py --quick         # a 1-minute smoke run
    python scripts/reliability.py --crash-trials 500 --processes 8 --commits 500 --json out.json

Suites (code in tests/reliability_harness.py and tests/corruption_harness.py; short versions run in CI as
tests/test_reliability_*.py):

* crash: a writer process (commits, forks, prune, gc, CrewAI imports) SIGKILLed at a random moment per trial;
  after each kill: fsck --full clean, no stray files, every acknowledged (fsynced) commit restores exactly;
* disk full: a 16 MB tmpfs filled up around a store (root only), then commit/import/gc;
* concurrency: N writer processes (own branch + one shared branch) while a process prunes and collects;
* corruption: bit flips / truncations / emptied frames / wrong kinds on single objects (fsck must name
  exactly the damaged objects and the commits needing them), then bytes flipped in or cut off store.db.
Exit status 1 when any suite found a problem (the problems are printed under the table).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from corruption_harness import corruption_run
from reliability_harness import concurrency_run, crash_run, disk_full_run


def _row(suite: str, **figures: object) -> tuple[str, str]:
    return suite, ", ".join(f"{k.replace('_', ' ')} {v:,}" if isinstance(v, int) else f"{k.replace('_', ' ')} {v}"
                            for k, v in figures.items())


def _atheris(seconds: int) -> tuple[int, int, str] | None:
    """Run scripts/fuzz_atheris.py for ``seconds``: (runs, crashes, tail of its output), or None without it."""
    import re
    import subprocess
    try:
        import atheris  # noqa: F401
    except ImportError:
        return None
    if seconds <= 0:
        return None
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "fuzz_atheris.py"), f"-max_total_time={seconds}",
                        "-print_final_stats=1"], capture_output=True, text=True, check=False, cwd=tempfile.gettempdir())
    m = re.search(r"stat::number_of_executed_units:\s*(\d+)", r.stderr)
    return (int(m.group(1)) if m else 0), (0 if r.returncode == 0 else 1), r.stderr[-1500:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small numbers: a smoke run of about a minute")
    ap.add_argument("--crash-trials", type=int, default=500)
    ap.add_argument("--disk-full-trials", type=int, default=100)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--commits", type=int, default=500, help="commits per concurrent process")
    ap.add_argument("--concurrency-runs", type=int, default=5, help="independent concurrency runs (races are rare)")
    ap.add_argument("--object-trials", type=int, default=400)
    ap.add_argument("--db-trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--atheris-seconds", type=int, default=120,
                    help="coverage-guided fuzzing time (scripts/fuzz_atheris.py; skipped without atheris)")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    a = ap.parse_args(argv)
    if a.quick:
        a.crash_trials, a.disk_full_trials, a.processes, a.commits, a.concurrency_runs = 20, 10, 4, 50, 2
        a.object_trials, a.db_trials, a.atheris_seconds = 40, 20, 10
    rows, problems, out = [], [], {}
    with tempfile.TemporaryDirectory(prefix="ckpt-reliability-") as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        c = crash_run(work / "crash", a.crash_trials, seed=a.seed)
        ops = ", ".join(f"{k} {v}" for k, v in sorted(c.kills_by_op.items(), key=lambda kv: -kv[1]))
        rows.append(_row("SIGKILL crash", trials=c.trials, kills=c.kills, commits_acknowledged=c.acknowledged,
                         restorable=c.restorable, pruned_by_design=c.pruned, corrupt_stores=c.corrupt_stores,
                         seconds=round(time.monotonic() - t0)))
        rows.append(("  kills landed in", ops))
        problems += [f"crash: {p}" for p in c.problems]
        out["crash"] = dataclasses.asdict(c)

        t0 = time.monotonic()
        d = disk_full_run(work / "diskfull", a.disk_full_trials, seed=a.seed)
        rows.append(_row(f"disk full ({d.method})", writes_attempted=d.attempts, refused_cleanly=d.refused_cleanly, fitted=d.fitted,
                         heads_moved=d.heads_moved, leftover_files=d.leftover_files, fsck_failures=d.fsck_failures,
                         recovered_after_freeing=d.recovered, seconds=round(time.monotonic() - t0)))
        problems += [f"disk full: {p}" for p in d.problems]
        out["disk_full"] = dataclasses.asdict(d)

        runs = []
        for i in range(a.concurrency_runs):
            (work / f"conc{i}").mkdir()
            runs.append(concurrency_run(work / f"conc{i}", a.processes, a.commits))
        rows.append(_row(f"concurrency ({a.concurrency_runs} runs of {a.processes} processes x {a.commits} commits, "
                         f"prune+gc running)", commits_acknowledged=sum(k.acknowledged for k in runs),
                         restorable=sum(k.restorable for k in runs), pruned_by_design=sum(k.pruned for k in runs),
                         lost=sum(k.lost for k in runs), process_errors=sum(k.errors for k in runs),
                         gc_rounds=sum(k.maint_rounds for k in runs), gc_busy=sum(k.gc_busy for k in runs),
                         seconds=round(sum(k.seconds for k in runs))))
        problems += [f"concurrency: {p}" for k in runs for p in k.problems]
        out["concurrency"] = [dataclasses.asdict(k) for k in runs]

        t0 = time.monotonic()
        (work / "corr").mkdir()
        r = corruption_run(work / "corr", a.object_trials, a.db_trials, seed=a.seed)
        rows.append(_row("object corruption", trials=r.trials, unreadable_after_damage=r.damaged_objects,
                         harmless_damage=r.benign, fsck_exact=r.fsck_exact, damaged_reads_refused=r.reads_refused,
                         clean_reads_exact=r.reads_exact, wrong_data=r.wrong_data))
        rows.append(_row("db file corruption", trials=r.db_trials, detected=r.db_detected,
                         no_visible_effect=r.db_harmless, seconds=round(time.monotonic() - t0)))
        problems += [f"corruption: {p}" for p in r.problems]
        out["corruption"] = dataclasses.asdict(r)

    fz = _atheris(a.atheris_seconds)
    if fz is not None:
        rows.append(_row("atheris (decoders, revisions, names, JSONB)", runs=fz[0], crashes=fz[1],
                         seconds=a.atheris_seconds))
        if fz[1]:
            problems.append(f"atheris: {fz[2]}")
        out["atheris"] = {"runs": fz[0], "crashes": fz[1]}
    width = max(len(s) for s, _ in rows)
    print(f"{'suite':<{width}}  figures")
    print(f"{'-' * width}  {'-' * 60}")
    for suite, figs in rows:
        print(f"{suite:<{width}}  {figs}")
    if problems:
        print(f"\n{len(problems)} problem(s):")
        for p in problems[:50]:
            print("  " + p.splitlines()[0][:300])
    if a.json:
        a.json.write_text(json.dumps(out, indent=1, default=str))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
