"""Push cost between two SQLite stores (issue 16): what a first push sends, and what an incremental push sends
after one more task, against what that task's checkpoints added to the source store.

Two histories:

* ``demo``: the store ``scripts/demo.py`` leaves (main crashed and resumed, plus the forked ``sea-otters``);
* ``star30``: a 30-task research crew checkpointing on ``"*"`` (every event), ScriptedLLM, offline.

For each, the source store is rebuilt by replaying the history's commits in write order (same documents,
parents, times, run ids and aliases; plain commits, so other ids than the writer's) with every checkpoint of
the last task on ``main`` held back. First push: ``push --all`` into an empty store. Then the held-back checkpoints are committed
(the source store grows by ``added`` bytes: frames at rest, per-checkpoint packs as the writer makes them;
automatic repacking is off so the figure is the checkpoints' own) and ``main`` is pushed again.
Target: the incremental push sends at most 2x ``added``. Also printed: the remote's object bytes right after the
first push (the transfer merges the one-commit packs it wrote) and after a gc of it.

    python benchmarks/bench_remote.py [--demo-store PATH] [--tasks 30]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crewckpt.history import store as store_mod  # noqa: E402
from crewckpt.history.store import Store  # noqa: E402
from crewckpt.views.document import CREWAI  # noqa: E402


def make_demo(folder: Path) -> Path:
    path = folder / "demo"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "demo.py"), "--store", str(path)], check=True,
                   stdout=subprocess.DEVNULL, cwd=folder)
    return path


def make_star(folder: Path, tasks: int) -> Path:
    path = folder / f"star{tasks}"
    code = (
        "import sys\n"
        "from crewckpt.crewai import CheckpointConfig\n"
        "from crewckpt.testing import offline_env, research_crew\n"
        "with offline_env():\n"
        f"    research_crew({tasks}, checkpoint=CheckpointConfig(location={str(path)!r}, on_events=['*']))"
        ".kickoff(inputs={'topic': 'otters'})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd=folder)
    return path


def last_task(history: Store) -> set[str]:
    """Ids of main's checkpoints after its second-to-last ``task_completed``: one more task's checkpoints."""
    chain = [c for c in history.log("main") if getattr(c, "live", False)]
    done = [i for i, c in enumerate(chain) if c.trigger == "task_completed"]
    cut = done[1] if len(done) > 1 else len(chain) - 1  # chain is newest first
    return {c.id for c in chain[:cut]}


def replay(history: Store, into: Store, ids: list[str], mapping: dict[str, str]) -> None:
    """Commit ``ids`` of ``history`` into ``into`` (same documents, branches, times, run ids, aliases), parents
    mapped through ``mapping`` (history id -> replayed id), which it extends. The ids differ from the
    history's: the CrewAI writer splits its documents along their pieces (event-record groups, tasks), a
    plain commit of the same JSON by content-defined chunks; both read back the same."""
    for cid in ids:
        c = history.info(cid)
        mapping[cid] = into.commit(history.read(cid), branch=c.branch, parents=[mapping[p] for p in c.parents],
                                   meta=c.meta or None, run_id=c.run_id, trigger=c.trigger, time_ns=c.time_ns,
                                   alias=c.alias)


def measure(name: str, path: Path, work: Path) -> dict[str, float]:
    store_mod.AUTO_PACKS = 10**9  # the checkpoints' own bytes, without the writer's periodic repack
    with Store.open(path, profile=CREWAI) as history:
        held = last_task(history)
        order = [c.id for c in history.list()]
        src = Store.init(work / f"{name}-src", profile=CREWAI)
        dst = Store.init(work / f"{name}-dst", profile=CREWAI)
        try:
            mapping: dict[str, str] = {}
            replay(history, src, [c for c in order if c not in held], mapping)
            for b, tip in history.branches().items():  # branches at their tips before the last task
                if b != "main" and b not in src.branches():
                    src.create_branch(b, mapping[tip])
            t = time.perf_counter()
            first = src.push(dst, all_branches=True)
            t_first = time.perf_counter() - t
            stored_first = dst.backend.object_stats()[2]  # the remote as the push left it (its packs merged)
            dst.gc()
            stored_gc = dst.backend.object_stats()[2]  # what gc makes of it: the best this layout does
            before = src.backend.object_stats()[2]
            replay(history, src, [c for c in order if c in held], mapping)
            added = src.backend.object_stats()[2] - before
            t = time.perf_counter()
            inc = src.push(dst, "main")
            t_inc = time.perf_counter() - t
            assert dst.branches() == {b: mapping[t] for b, t in history.branches().items()} and dst.fsck().ok
            assert dst.read("main") == history.read("main")
        finally:
            src.close()
            dst.close()
    return {"commits": len(order), "first_commits": first.commits, "first_objects": first.objects,
            "first_bytes": first.bytes, "first_s": t_first, "inc_commits": inc.commits, "inc_objects": inc.objects,
            "inc_bytes": inc.bytes, "inc_s": t_inc, "added": added, "stored_first": stored_first,
            "stored_gc": stored_gc}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--demo-store", help="an existing demo store (default: run scripts/demo.py)")
    p.add_argument("--tasks", type=int, default=30)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        demo = Path(args.demo_store) if args.demo_store else make_demo(work)
        rows = {"demo": measure("demo", demo, work),
                f"star{args.tasks}": measure("star", make_star(work, args.tasks), work)}
    print("| store | commits | first push: commits, objects, bytes, time | remote after it, after its gc | one more "
          "task: commits, objects, bytes sent, time | bytes the task added to the source | sent / added |")
    print("|---|---|---|---|---|---|---|")
    ok = True
    for name, r in rows.items():
        ratio = r["inc_bytes"] / r["added"] if r["added"] else float("inf")
        ok &= ratio <= 2.0
        print(f"| {name} | {r['commits']} | {r['first_commits']}, {r['first_objects']}, {r['first_bytes']:,} B, "
              f"{r['first_s'] * 1000:.0f} ms | {r['stored_first']:,} B, {r['stored_gc']:,} B "
              f"({r['stored_first'] / r['stored_gc']:.2f}x) | {r['inc_commits']}, {r['inc_objects']}, {r['inc_bytes']:,} B, "
              f"{r['inc_s'] * 1000:.0f} ms | {r['added']:,} B | {ratio:.2f}x |")
    print(f"target (incremental push <= 2x the bytes added): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
