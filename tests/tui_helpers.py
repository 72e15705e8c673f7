"""Helpers for the TUI tests: a CrewAI-shaped store without running CrewAI, and Pilot waiting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crewckpt import Store
from crewckpt.views.document import CREWAI

ROLES = ("Researcher", "Writer", "Editor")
T0 = 1_795_000_000_000_000_000  # ns; fixed so relative times are stable with now_ns


def crew_doc(done: int, total: int = 4, *, topic: str = "otters", outputs: dict[int, str] | None = None,
             events: int | None = None) -> dict[str, Any]:
    """A checkpoint document in CrewAI 1.15's shape: one crew, ``done`` of ``total`` tasks completed."""
    outputs = outputs or {}
    tasks = []
    for k in range(1, total + 1):
        out = None
        if k <= done:
            raw = outputs.get(k, f"[{ROLES[(k - 1) % 3]}] task{k}: findings on {topic} part {k}")
            out = {"raw": raw, "agent": ROLES[(k - 1) % 3], "name": f"task{k}"}
        tasks.append({"id": f"t{k}", "name": f"task{k}", "description": f"Step {k} about {topic}.",
                      "agent": {"role": ROLES[(k - 1) % 3]}, "output": out,
                      "start_time": "2026-11-30T00:00:00" if k <= done + 1 else None})
    n = events if events is not None else 2 + 3 * done
    kinds = ["crew_kickoff_started"] + [("task_started", "llm_call_completed", "task_completed")[i % 3]
                                        for i in range(n - 1)]
    nodes = {f"e{i}": {"event": {"type": kinds[i], "emission_sequence": i + 1,
                                 "timestamp": f"2026-11-30T00:00:{i % 60:02d}.000Z",
                                 "task_name": f"task{i // 3 + 1}" if i else None,
                                 "agent_role": None}, "edges": {}} for i in range(n)}
    crew = {"entity_type": "crew", "name": "research", "id": "crew-1", "tasks": tasks,
            "agents": [{"role": r, "goal": "g"} for r in ROLES], "checkpoint_inputs": {"topic": topic, "n": 3}}
    return {"crewai_version": "1.15.30", "entities": [crew], "event_record": {"nodes": nodes}}


def build_store(path: Path) -> tuple[Store, dict[str, str]]:
    """main: 5 checkpoints (0..4 of 4 tasks); branch "alt" forked at main's 3rd (topic beavers, 2 commits);
    a second run on "main" started from scratch is not made (one top-level line). Returns (store, names)."""
    store = Store.init(path, profile=CREWAI)  # the CrewAI layer's store: CrewAI summaries
    ids: dict[str, str] = {}
    for k in range(5):
        ids[f"m{k}"] = store.commit(crew_doc(k), branch="main", trigger="task_completed" if k else
                                    "crew_kickoff_started", time_ns=T0 + k * 60_000_000_000)
    for k in (3, 4):
        ids[f"a{k}"] = store.commit(crew_doc(k, topic="beavers", outputs={1: "hand edit"}), branch="alt",
                                    parents=[ids["m2"]] if k == 3 else None, trigger="task_completed",
                                    time_ns=T0 + (10 + k) * 60_000_000_000)
    return store, ids


NOW = T0 + 20 * 60_000_000_000


async def settle(pilot: Any) -> None:
    """Let pending workers (document reads, diffs) finish and the screen update."""
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def text_of(app: Any, selector: str) -> str:
    """Plain text a Static shows."""
    widget = app.query_one(selector)
    content = widget.content if hasattr(widget, "content") else widget.renderable
    return _plain(content)


def _plain(content: Any) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    with console.capture() as cap:
        console.print(content)
    return cap.get()
