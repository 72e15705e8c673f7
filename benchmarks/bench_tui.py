"""TUI speed on a 10,000-checkpoint store: tree from commit summaries, lazy pages against an eager tree.

Run: python benchmarks/bench_tui.py [--commits 10000] [--store PATH]

Builds (or reuses) a store with one long run on ``main`` and forks of it (each a branch of 100 checkpoints
leaving from a checkpoint of main), then measures, in one process:
  - Store.list() of every commit (index rows + summaries) and build_history (the lines/forks model),
  - app start until the newest checkpoint is shown (lazy: PAGE nodes per line) against an eager tree that
    adds every checkpoint node up front (PAGE = everything, all lines expanded),
  - snapshot reads during start (must be 1: the highlighted checkpoint; the tree never decodes snapshots),
  - cursor-key latency (Pilot press until idle; the highlighted checkpoint's Overview shown), a held key
    (30 cursor moves 10 ms apart: snapshot reads must stay ~1, the cursor never rests), revealing the
    oldest checkpoint of main (pages loaded on the way), refresh; floors: a 1-checkpoint store and a bare
    50-node Textual Tree (machine load shows in every figure: compare rows of one run).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from crewckpt import Store
from crewckpt.tui import app as app_mod
from crewckpt.tui.app import CheckpointBrowser
from crewckpt.tui.model import build_history
from crewckpt.views.document import CREWAI

FORK_LEN = 100
TRIGGERS = ("task_started", "agent_execution_started", "llm_call_completed", "task_completed")


def doc(step: int, total: int = 12, topic: str = "otters") -> dict:
    done = min(total, step // 4)
    tasks = [{"id": f"t{k}", "name": f"task{k}", "description": f"Step {k} about {topic}.",
              "agent": {"role": "Researcher"}, "output": {"raw": f"finding {k} on {topic}"} if k <= done else None}
             for k in range(1, total + 1)]
    nodes = {f"e{i}": {"event": {"type": TRIGGERS[i % 4], "emission_sequence": i}} for i in range(step % 50)}
    return {"crewai_version": "1.15.30", "entities": [{"entity_type": "crew", "name": "research", "tasks": tasks,
                                                       "checkpoint_inputs": {"topic": topic}}],
            "event_record": {"nodes": nodes}}


def build(path: Path, commits: int) -> None:
    forks = max(1, commits // (2 * FORK_LEN))
    main_len = commits - forks * FORK_LEN
    t0 = time.perf_counter()
    with Store.init(path, profile=CREWAI) as store:  # CrewAI-shaped documents, as the writer stores them
        main = []
        for i in range(main_len):
            main.append(store.commit(doc(i), branch="main", trigger=TRIGGERS[i % 4], time_ns=1_795_000_000 * 10**9 + i))
        for f in range(forks):
            at = main[(f * 37) % main_len]
            parent = [at]
            for i in range(FORK_LEN):
                cid = store.commit(doc(i, topic=f"topic {f}"), branch=f"fork/{f:03d}", parents=parent,
                                   trigger=TRIGGERS[i % 4], time_ns=1_795_000_000 * 10**9 + main_len + f * FORK_LEN + i)
                parent = [cid]
    print(f"built store: {commits} commits ({main_len} on main, {forks} forks x {FORK_LEN}) "
          f"in {time.perf_counter() - t0:.1f} s")


async def measure_app(store: Store, page: int, eager: bool) -> dict[str, float]:
    app_mod.PAGE = page
    reads = 0
    real_read = store.read

    def counting_read(rev: str):
        nonlocal reads
        reads += 1
        return real_read(rev)

    store.read = counting_read  # type: ignore[method-assign]
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    app = CheckpointBrowser(store)
    async with app.run_test(size=(160, 50)) as pilot:
        if eager:
            for li in range(len(app.history.lines)):
                node = app._line_nodes.get(li)
                if node is None:
                    app._fill_forks(app.history.lines[li].fork_point)
                    node = app._line_nodes[li]
                app._fill_line(li, 0)
                app._fill_line(li, len(app.history.lines[li].commits))
                node.expand()
            for cid in list(app.history.forks_at):
                app._commit_nodes[cid].expand()
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        out["start_s"] = time.perf_counter() - t0
        out["nodes"] = len(app._commit_nodes)
        out["reads_at_start"] = reads
        lat, shown = [], []
        for _ in range(30):
            k0 = time.perf_counter()
            await pilot.press("down")
            lat.append(time.perf_counter() - k0)
            while app._shown != app.selected or app._rendered.get("overview") != app.selected:
                await asyncio.sleep(0.002)
            shown.append(time.perf_counter() - k0)
        out["key_ms_median"] = statistics.median(lat) * 1000
        out["key_ms_max"] = max(lat) * 1000
        out["detail_ms_median"] = statistics.median(shown) * 1000
        await app.workers.wait_for_complete()
        out["reads_after_30_keys"] = reads
        before = reads
        b0 = time.perf_counter()
        tree = app.query_one("#tree")
        for _ in range(30):  # a held arrow key: 30 moves faster than the cursor rests (Pilot waits per key)
            tree.action_cursor_down()
            await asyncio.sleep(0.01)
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        out["held_key_30_moves_s"] = time.perf_counter() - b0
        out["reads_while_held"] = reads - before
        main_line = app.history.line_of[app.history.lines[0].commits[0].id]
        oldest = app.history.lines[main_line].commits[0].id
        r0 = time.perf_counter()
        app.reveal(oldest)
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        out["reveal_oldest_s"] = time.perf_counter() - r0
        out["nodes_after_reveal"] = len(app._commit_nodes)
        f0 = time.perf_counter()
        await pilot.press("r")
        await pilot.pause()
        await app.workers.wait_for_complete()
        out["refresh_s"] = time.perf_counter() - f0
    store.read = real_read  # type: ignore[method-assign]
    return out


async def trivial_key_ms() -> float:
    """Median Pilot key press on a bare 50-node Textual Tree: the floor any Textual app pays here."""
    from textual.app import App, ComposeResult
    from textual.widgets import Tree

    class Bare(App[None]):
        def compose(self) -> ComposeResult:
            tree: Tree[None] = Tree("root")
            for i in range(50):
                tree.root.add_leaf(str(i))
            tree.root.expand()
            yield tree

    app = Bare()
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        lat = []
        for _ in range(30):
            k0 = time.perf_counter()
            await pilot.press("down")
            lat.append(time.perf_counter() - k0)
    return statistics.median(lat) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=10_000)
    ap.add_argument("--store", type=Path, help="reuse or create the store here (default: a temporary folder)")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="bench-tui-")
    path = args.store or Path(tmp.name) / ".ckpt"
    if not (path / "store.db").exists():
        build(path, args.commits)
    with Store.open(path) as store:
        t0 = time.perf_counter()
        infos = store.list()
        t_list = time.perf_counter() - t0
        t0 = time.perf_counter()
        history = build_history(infos, store.branches())
        t_model = time.perf_counter() - t0
        print(f"commits: {history.count}, lines: {len(history.lines)}, forks nested: "
              f"{sum(len(v) for v in history.forks_at.values())}")
        print(f"Store.list():   {t_list * 1000:8.1f} ms   ({t_list / history.count * 1e6:.1f} us per commit)")
        print(f"build_history:  {t_model * 1000:8.1f} ms")
        page = app_mod.PAGE
        with tempfile.TemporaryDirectory() as empty_dir, Store.init(Path(empty_dir) / ".ckpt") as empty:
            empty.commit(doc(0), trigger="manual")
            base = asyncio.run(measure_app(empty, page, eager=False))
        print(f"floor: app start on a 1-checkpoint store {base['start_s']:.2f} s; key press on a bare 50-node "
              f"Textual Tree {asyncio.run(trivial_key_ms()):.1f} ms (median)")
        lazy = asyncio.run(measure_app(store, page, eager=False))
        eager = asyncio.run(measure_app(store, 10**9, eager=True))
        app_mod.PAGE = page
        print(f"{'':24}{'lazy (PAGE=' + str(page) + ')':>18}{'eager (all nodes)':>20}")
        for key, fmt in (("start_s", "{:.2f} s"), ("nodes", "{:.0f}"), ("reads_at_start", "{:.0f}"),
                         ("key_ms_median", "{:.1f} ms"), ("key_ms_max", "{:.1f} ms"),
                         ("detail_ms_median", "{:.1f} ms"),
                         ("reads_after_30_keys", "{:.0f}"), ("held_key_30_moves_s", "{:.2f} s"),
                         ("reads_while_held", "{:.0f}"), ("reveal_oldest_s", "{:.2f} s"),
                         ("nodes_after_reveal", "{:.0f}"), ("refresh_s", "{:.2f} s")):
            print(f"{key:24}{fmt.format(lazy[key]):>18}{fmt.format(eager[key]):>20}")
        print(f"start, eager / lazy: {eager['start_s'] / lazy['start_s']:.1f}x")
    tmp.cleanup()


if __name__ == "__main__":
    main()
