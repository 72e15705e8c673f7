"""Dumping a crew at a checkpoint as the crew grows: crewckpt's CrewDumper vs pydantic's whole dump (issue 13).

    python benchmarks/bench_dump.py [--tasks 6 30 100 300] [--steps 200]

For each N: an N-task research crew (``crewckpt.testing.research_crew``, the scripted offline LLM) run to its
end without checkpoints, then ``--steps`` dumps in which one task in the middle changes as a running task
does (its name at every step, its output every 6th step). Printed, median thread CPU per dump (ms):

* ``whole``: pydantic's JSON of the whole crew (``model_dump_json``), what CrewAI's providers serialize at
  every checkpoint;
* ``crewckpt``: ``CrewDumper.dump``, the value crewckpt commits (equal to the whole dump once its agent
  references are expanded);
* ``floor``: pydantic's JSON of the changed task alone, the least any dumper must do.

``crewckpt / whole`` should fall as N grows (its work follows the change), and ``crewckpt`` should stay
near-flat in N. The task texts are what grows: in a sequential crew task k's prompt context holds the
outputs of tasks 1..k-1, so the whole dump grows with the square of N.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any


def _median_ms(fn: Callable[[int], Any], steps: int) -> float:
    times = []
    for i in range(steps):
        t = time.thread_time()
        fn(i)
        times.append(time.thread_time() - t)
    return statistics.median(times) * 1000


def measure(n_tasks: int, steps: int) -> dict[str, float]:
    """The three medians (ms) and the whole dump's size (bytes) for an ``n_tasks`` crew."""
    from crewckpt.crewai.entities import CrewDumper
    from crewckpt.crewai.snapshot import SnapshotBuilder
    from crewckpt.testing import offline_env, research_crew

    with offline_env():
        crew = research_crew(n_tasks, checkpoint=None)
        crew.kickoff(inputs={"topic": "otters"})
    k = n_tasks // 2
    task = crew.tasks[k]
    output = task.output
    assert output is not None

    def change(i: int) -> None:
        task.name = f"task{k} step {i}"
        if i % 6 == 0:
            task.output = output.model_copy(update={"raw": f"{output.raw} (step {i})"})

    dumper = CrewDumper(SnapshotBuilder())
    for _ in range(3):  # the first dumps check the pieces against a whole dump
        dumper.dump(crew)
    size = len(crew.model_dump_json(warnings=False))

    def whole(i: int) -> None:
        change(i)
        crew.model_dump_json(warnings=False)

    def pieced(i: int) -> None:
        change(i)
        dumper.dump(crew)

    def floor(i: int) -> None:
        change(i)
        crew.model_dump_json(include={"tasks": {k: True}}, warnings=False)

    t_change = _median_ms(change, steps)
    return {"whole": _median_ms(whole, steps) - t_change, "crewckpt": _median_ms(pieced, steps) - t_change,
            "floor": _median_ms(floor, steps) - t_change, "bytes": size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", type=int, nargs="+", default=[6, 30, 100, 300])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # pydantic's serializer warnings about CrewAI's own fields
    print(f"{'tasks':>5} {'whole JSON':>12} {'whole ms':>9} {'crewckpt ms':>12} {'floor ms':>9} "
          f"{'crewckpt/whole':>15} {'crewckpt/floor':>15}")
    for n in args.tasks:
        r = measure(n, args.steps)
        print(f"{n:>5} {r['bytes']:>12,} {r['whole']:>9.3f} {r['crewckpt']:>12.3f} {r['floor']:>9.3f} "
              f"{r['crewckpt'] / r['whole']:>14.2f}x {r['crewckpt'] / r['floor']:>14.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
