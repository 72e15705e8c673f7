"""crewckpt demo: crash, resume, fork and compare a 6-task CrewAI research crew, offline, in seconds.

    python scripts/demo.py            # store in ./.ckpt (a rerun replaces it unless you added to it)

1. A research crew (3 agents, 6 tasks) checkpoints every event (``on_events=["*"]``) into ``./.ckpt``; its
   scripted LLM fails at task 4, so the run stops.
2. ``Crew.from_checkpoint(CheckpointConfig(restore_from="latest"))`` resumes it: only tasks 4-6 run.
3. ``Crew.fork(...)`` from the checkpoint after task 2, kicked off with an edited input ("sea otters"),
   finishes a second branch.
4. It prints the history graph, what differs between the two branches' results, and the bytes crewckpt
   stored beside what CrewAI's JsonProvider writes for the same checkpoints.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crewai import Crew
from crewai.events.event_bus import crewai_event_bus
from crewai.state.provider.json_provider import JsonProvider

from crewckpt import CkptError, Store
from crewckpt.cli.graph import graph_rows
from crewckpt.crewai import CheckpointConfig
from crewckpt.crewai.writer import forget_stores
from crewckpt.testing import ScriptedLLM, ScriptedLLMError, offline_env, research_crew  # sets offline env
from crewckpt.views.diff import diff_documents
from crewckpt.views.diff_render import human_bytes, plain_text, render_stat
from crewckpt.views.document import crewai_json

N_TASKS = 6
FAIL_AT_CALL = 4  # the scripted LLM answers one call per task: call 4 is task 4
MILESTONES = {"crew_kickoff_started", "task_completed", "task_failed", "crew_kickoff_failed",
              "crew_kickoff_completed"}
MARKER = "made-by-demo.txt"  # in the store folder: a later demo run may replace this store


def banner(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, 72 - len(text)))


@contextlib.contextmanager
def captured_output() -> Iterator[list[str]]:
    """Send file descriptors 1 and 2 to a temporary file for the block (CrewAI prints its listener errors
    and Rust panics straight to them); yields a list that holds the captured text afterwards. On an
    exception the captured text is replayed to stderr."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    out: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        ok = False
        try:
            yield out
            ok = True
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            out.append(tmp.read().decode(errors="replace"))
            if not ok:
                sys.stderr.write(out[0])


def run_scenario(make_config: Any, latest: Any, after_task: Any) -> dict[str, Any]:
    """Crash at task 4, resume from the latest checkpoint, fork after task 2 with a new topic."""
    result: dict[str, Any] = {}
    crew = research_crew(N_TASKS, llm=ScriptedLLM(fail_at_call=FAIL_AT_CALL), checkpoint=make_config())
    start = time.perf_counter()
    try:
        crew.kickoff(inputs={"topic": "otters"})
        raise SystemExit("demo: the scripted failure did not happen")
    except ScriptedLLMError as exc:
        result["error"] = str(exc)
    crewai_event_bus.flush()
    resumed = Crew.from_checkpoint(make_config(restore_from=latest()))
    result["resumed_out"] = resumed.kickoff().raw
    result["resumed_calls"] = sum(a.llm.calls for a in {id(a.llm): a for a in resumed.agents}.values())
    crewai_event_bus.flush()
    fork = Crew.fork(make_config(restore_from=after_task(2)), branch="sea-otters")
    result["fork_out"] = fork.kickoff(inputs={"topic": "sea otters"}).raw
    result["fork_calls"] = sum(a.llm.calls for a in {id(a.llm): a for a in fork.agents}.values())
    crewai_event_bus.flush()
    result["seconds"] = time.perf_counter() - start
    return result


def warm_up() -> None:
    """Pay CrewAI's one-time lazy imports and schema builds (about 2 s on the first restore of a process)
    before anything is timed, so both scenarios are measured warm."""
    with tempfile.TemporaryDirectory(prefix="crewckpt-demo-warm-") as folder:
        cfg = CheckpointConfig(location=folder, on_events=["*"])
        research_crew(2, checkpoint=cfg).kickoff(inputs={"topic": "warm-up"})
        Crew.from_checkpoint(CheckpointConfig(location=folder, restore_from="main~3"))
        crewai_event_bus.reset_runtime_state()
        forget_stores()


def crewckpt_scenario(store_path: Path) -> tuple[dict[str, Any], Store]:
    def make_config(**kw: Any) -> CheckpointConfig:
        return CheckpointConfig(location=str(store_path), on_events=["*"], **kw)

    def after_task(k: int) -> str:
        store = Store.open(store_path)
        return next(c.id for c in store.list("main")
                    if c.trigger == "task_completed" and c.summary["tasks_done"] == k)

    result = run_scenario(make_config, lambda: "latest", after_task)
    return result, Store.open(store_path)


def crewai_json_output(store: Store, folder: Path) -> tuple[int, int]:
    """What CrewAI's JsonProvider writes for the checkpoints of ``store``: each snapshot is serialized as
    CrewAI's listener does (``json.dumps``) and handed to ``JsonProvider.checkpoint`` with its parent and
    branch, synchronously. Returns (files, bytes) written under ``folder``.

    Why not a second run with CrewAI's provider: its listener writes from a thread pool while the crew
    mutates the state, so under load some of its writes fail and which checkpoints survive is chance."""
    provider = JsonProvider()
    crewai_ids: dict[str, str] = {}
    for c in store.list():  # write order, so a parent is always written before its children
        parent = crewai_ids.get(c.parents[0]) if c.parents else None
        doc = crewai_json(store.read(c.id), c.id[:12])  # CrewAI's JSON: task agents expanded
        location = provider.checkpoint(json.dumps(doc), str(folder), parent_id=parent,
                                       branch=c.branch)
        crewai_ids[c.id] = provider.extract_id(location)
    files = list(folder.rglob("*.json"))
    return len(files), sum(p.stat().st_size for p in files)


def print_graph(store: Store, show_all: bool) -> None:
    commits = sorted(store.list(), key=lambda c: c.seq, reverse=True)
    keep = {c.id for c in commits if show_all or c.trigger in MILESTONES}
    keep |= set(store.branches().values())
    by_id = {c.id: c for c in commits}

    def shown_parents(cid: str) -> list[str]:
        out = []
        for p in by_id[cid].parents:
            while p in by_id and p not in keep:
                p = by_id[p].parents[0] if by_id[p].parents else None
            if p is not None:
                out.append(p)
        return out

    tips: dict[str, list[str]] = {}
    for name, tip in store.branches().items():
        tips.setdefault(tip, []).append(name)
    rows = [(c.id, shown_parents(c.id)) for c in commits if c.id in keep]
    for row in graph_rows(rows):
        for line in row.before:
            print(f"  {line}")
        c = by_id[row.commit_id]
        refs = f" ({', '.join(sorted(tips[c.id]))})" if c.id in tips else ""
        print(f"  {row.row} {c.id[:10]} {c.trigger or 'manual':<24} tasks {c.summary['tasks_done']}/"
              f"{c.summary['tasks_total']}{refs}")
    if not show_all:
        print(f"  ({len(commits) - len(keep)} intermediate checkpoints not shown; `scripts/demo.py --all` shows them here)")


def print_results_diff(store: Store) -> None:
    main, fork = (crewai_json(store.read(rev), rev) for rev in ("main", "sea-otters"))  # as `ckpt diff` does
    print(plain_text(render_stat(diff_documents(main, fork))))
    crew_main = next(e for e in main["entities"] if e.get("entity_type") == "crew")
    crew_fork = next(e for e in fork["entities"] if e.get("entity_type") == "crew")
    print("\n  task     main (topic: otters)                         sea-otters (topic: sea otters)")
    for a, b in zip(crew_main["tasks"], crew_fork["tasks"]):
        ra, rb = (t["output"]["raw"] if t.get("output") else "-" for t in (a, b))
        mark = "  " if ra == rb else "≠ "
        print(f"{mark}{a['name']:<7} {ra[:52]:<52} {rb[:52]}")


class NotOurs(Exception):
    """The demo's store folder holds something else (the message says what to do)."""


_FIX = ("pass --store NEW_DIR for a fresh demo store elsewhere, or delete that folder yourself (or pass --reset) "
        "to run the demo there again")


def store_record(store: Store) -> dict[str, Any]:
    """What ``store`` holds, for :data:`MARKER`: ``commits`` (sorted live commit ids), ``refs`` (every ref
    name -> target id: branches, runs, anything else) and ``reflog`` (ref name -> number of entries)."""
    refs = {name: target.hex() for name, target in store.backend.refs("").items()}
    return {"commits": sorted(c.id for c in store.list()), "refs": refs,
            "reflog": {name: len(store.backend.reflog(name)) for name in refs}}


def write_marker(store_path: Path, record: dict[str, Any] | None) -> None:
    """Write :data:`MARKER` (atomically): a note for people, then the demo's :func:`store_record` as JSON
    (``null`` while the demo runs: a run killed before it recorded leaves a store no rerun replaces)."""
    tmp = store_path / (MARKER + ".tmp")
    tmp.write_text("Written by scripts/demo.py: running the demo again replaces this store while it holds "
                   "exactly what the demo wrote (below).\n" + json.dumps({"demo_record": record}) + "\n")
    os.replace(tmp, store_path / MARKER)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _join(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _refs_phrase(refs: list[str]) -> str:
    """"branch main", "branches a, b", "run run-1a2b", "refs refs/x, ..." (at most three names shown)."""
    for prefix, one, many in (("refs/heads/", "branch", "branches"), ("refs/runs/", "run", "runs")):
        if all(r.startswith(prefix) for r in refs):
            kind, names = (one if len(refs) == 1 else many), [r.removeprefix(prefix) for r in refs]
            break
    else:
        kind, names = ("ref" if len(refs) == 1 else "refs"), refs
    return f"{kind} {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"


def beyond_demo(recorded: dict[str, Any], now: dict[str, Any]) -> str | None:
    """How the store state ``now`` differs from what the demo ``recorded`` (both :func:`store_record`), as
    one parenthesis: what was added, then what changed, e.g. "(3 checkpoints and 2 branches added; branch
    main moved; 45 demo checkpoints removed)"; None when they are the same."""
    if recorded == now:
        return None
    old_refs, new_refs = recorded["refs"], now["refs"]
    added_commits = set(now["commits"]) - set(recorded["commits"])
    added_refs = [r for r in new_refs if r not in old_refs]
    n_branches = sum(r.startswith("refs/heads/") for r in added_refs)
    n_runs = sum(r.startswith("refs/runs/") for r in added_refs)
    n_other = len(added_refs) - n_branches - n_runs
    added = [p for p in (
        _count(len(added_commits), "checkpoint", "checkpoints") if added_commits else "",
        _count(n_branches, "branch", "branches") if n_branches else "",
        _count(n_runs, "run", "runs") if n_runs else "",
        _count(n_other, "other ref", "other refs") if n_other else "") if p]
    moved = [r for r in old_refs if r in new_refs and new_refs[r] != old_refs[r]]
    gone = [r for r in old_refs if r not in new_refs]
    removed = set(recorded["commits"]) - set(now["commits"])
    changed = [p for p in (f"{_refs_phrase(moved)} moved" if moved else "",
                           f"{_refs_phrase(gone)} {'gone' if all(r.startswith('refs/runs/') for r in gone) else 'deleted'}"
                           if gone else "",  # a run ref goes when prune removes the run's checkpoints
                           f"{_count(len(removed), 'demo checkpoint', 'demo checkpoints')} removed"
                           if removed else "") if p]
    if not (added or changed):  # refs moved away and back: only their reflogs show it
        extra = sum(now["reflog"].get(r, 0) - recorded["reflog"].get(r, 0) for r in new_refs)
        added = [_count(max(extra, 1), "reflog entry", "reflog entries")]
    return "(" + "; ".join(([f"{_join(added)} added"] if added else []) + changed) + ")"


def _store_file(name: str) -> bool:
    """Whether a file named ``name`` in a store folder is one a SQLite store (or this demo) writes."""
    return name in (MARKER, "gc.lock") or name.startswith("store.db") or name.endswith(".lock")


def _refuse_non_store(store_path: Path) -> None:
    """Raise NotOurs when ``store_path`` is a file or a folder holding files a store does not write."""
    if not store_path.is_dir():
        raise NotOurs(f"demo: left {store_path} as it is: it is a file, not a store folder; pass --store NEW_DIR "
                      "for the demo store")
    others = sorted(p.name for p in store_path.iterdir() if not _store_file(p.name))
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise NotOurs(f"demo: left {store_path} as it is: it holds files that are not a crewckpt store's "
                      f"({shown}); pass --store NEW_DIR for the demo store")


def prepare_store(store_path: Path, reset: bool) -> str | None:
    """Make room for a fresh demo store at ``store_path``; returns what was done (a line to print), or
    None when there was nothing there. A store an earlier demo run wrote is replaced only while it holds
    exactly what that run recorded in :data:`MARKER` (so no checkpoint, branch or ref a user added is
    lost); anything else is replaced only with ``reset``.

    Raises:
        NotOurs: ``store_path`` holds something the demo did not write and ``reset`` is false; nothing was
            touched.
    """
    if not store_path.exists() or (store_path.is_dir() and not any(store_path.iterdir())):
        return None  # nothing there (an empty folder: the demo's store goes in it)
    made_by_demo = (store_path / MARKER).is_file()
    if not (made_by_demo or reset):
        _refuse_non_store(store_path)  # --reset would not replace these either: do not suggest it
        raise NotOurs(f"demo: {store_path} exists and was not written by this demo; run with --reset to "
                      "replace it or --store DIR to use another folder")
    try:
        old = Store.open(store_path)
        try:
            now = store_record(old)
        finally:
            old.close()
        count = f"{len(now['commits'])} checkpoints"
    except (CkptError, OSError) as exc:
        if not reset:  # cannot tell what it holds, so it may hold a user's checkpoints
            raise NotOurs(f"demo: {store_path} cannot be read ({exc}); {_FIX}") from exc
        count = "unreadable"
    if not reset:
        try:
            lines = (store_path / MARKER).read_text(encoding="utf-8").splitlines()
            recorded = json.loads(lines[-1])["demo_record"] if lines else None
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError):
            recorded = None
        if not isinstance(recorded, dict):
            raise NotOurs(f"demo: {store_path} was written by a demo run that did not record its checkpoints "
                          f"(an older version, or killed); {_FIX}")
        differs = beyond_demo(recorded, now)
        if differs is not None:
            raise NotOurs(f"demo: left {store_path} as it is: it changed since the demo wrote it {differs}, "
                          f"so a rerun would lose that; {_FIX}")
    _refuse_non_store(store_path)  # --reset replaces a store, never a folder that holds anything else
    shutil.rmtree(store_path)
    what = "the store (--reset)" if reset else "an earlier demo run's store"
    return f"demo: replaced {what} at {store_path} ({count}); --store DIR keeps runs apart"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default=".ckpt", help="store folder (default ./.ckpt)")
    parser.add_argument("--reset", action="store_true", help="replace the store folder even when the demo did not write it")
    parser.add_argument("--all", action="store_true", help="show every checkpoint in the graph")
    args = parser.parse_args(argv)
    store_path = Path(args.store).resolve()
    try:
        replaced = prepare_store(store_path, args.reset)
    except NotOurs as exc:
        print(exc, file=sys.stderr)
        return 2
    if replaced:
        print(replaced)
    Store.init(store_path).close()
    write_marker(store_path, None)
    try:
        return run_demo(store_path, args.store, args.all)
    finally:  # also after a failure part way: what is in the store now is all the demo's own
        forget_stores()
        with contextlib.suppress(CkptError, OSError):
            done = Store.open(store_path)
            try:
                write_marker(store_path, store_record(done))
            finally:
                done.close()


def run_demo(store_path: Path, store_arg: str, show_all: bool) -> int:
    """The demo's steps, printed, into the fresh store at ``store_path``; returns the exit code."""
    with offline_env(), tempfile.TemporaryDirectory(prefix="crewckpt-demo-json-") as json_dir:
        warm_up()
        banner("1. run a 6-task crew, checkpointing every event; the LLM fails at task 4")
        with captured_output():  # CrewAI prints each failed LLM call of the simulated outage
            result, store = crewckpt_scenario(store_path)
        first_run = [c for c in store.list() if c.run_id == store.list()[0].run_id]
        print(f"  run failed in task 4 ({result['error']}; CrewAI retried the call twice)")
        print(f"  {len(first_run)} checkpoints in one chain, the last: {first_run[-1].trigger} "
              f"with {first_run[-1].summary['tasks_done']}/{first_run[-1].summary['tasks_total']} tasks done")
        banner("2. resume from the latest checkpoint")
        print(f"  Crew.from_checkpoint(CheckpointConfig(restore_from='latest')).kickoff()"
              f" -> {result['resumed_calls']} LLM calls (tasks 4-6 only)")
        print(f"  result: {result['resumed_out']}")
        banner("3. fork after task 2 with topic='sea otters'")
        print(f"  Crew.fork(CheckpointConfig(restore_from=<after task 2>), branch='sea-otters')"
              f".kickoff(inputs={{'topic': 'sea otters'}}) -> {result['fork_calls']} LLM calls")
        print(f"  result: {result['fork_out']}")

        banner("history: every checkpoint" if show_all else
               "history: milestone checkpoints (`ckpt log --graph --all --oneline` shows every one)")
        print_graph(store, show_all)
        banner("what differs between main and sea-otters (ckpt diff main sea-otters --stat)")
        print_results_diff(store)

        banner("bytes stored for the same three runs")
        stats = store.stats()
        json_files, json_bytes = crewai_json_output(store, Path(json_dir))
        store.close()
        forget_stores()  # closes crewckpt's writer handle too: SQLite folds its WAL into store.db
        ours = sum(p.stat().st_size for p in store_path.iterdir() if p.is_file() and not p.name.startswith(MARKER))
        print(f"  crewckpt  {stats['commits']:>4} checkpoints  {human_bytes(ours):>9} on disk "
              f"(one SQLite file; {human_bytes(stats['logical_bytes'])} of checkpoint JSON)")
        print(f"  CrewAI    {json_files:>4} JSON files   {human_bytes(json_bytes):>9} on disk "
              "(its JsonProvider, given the same checkpoints)")
        print(f"  -> crewckpt stores {json_bytes / max(ours, 1):.1f}x fewer bytes; the three runs took "
              f"{result['seconds']:.2f} s with a checkpoint at every event")
        print(f"\nstore: {store_path}   try: ckpt --store {store_arg} log --graph --all --oneline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
