"""Fork a checkpoint with edited kickoff inputs and task outputs (what the TUI's Fork runs).

Editing a completed task's output invalidates every later task of the same crew: their outputs are cleared
(so CrewAI's resume starts at the first edited-downstream task and they run again with the edited output as
context), and their agents' executor state is dropped so they start fresh instead of resuming a stale
conversation. Tasks before the first edit keep their outputs and are not run again. This is the rule of
CrewAI's own checkpoint TUI (``crewai_cli.checkpoint_tui._apply_task_overrides``, 1.15.30), applied to the
restored state before anything runs.

Unlike CrewAI, the edited state is first written as the new branch's first checkpoint (trigger
:data:`FORK_TRIGGER`, parent = the forked checkpoint), so ``ckpt diff <fork> <fork>^`` shows exactly what the
user changed, and the branch exists even when nothing is left to run.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

FORK_TRIGGER = "fork"
"""Trigger recorded on the first checkpoint of a fork made by :func:`fork_with_edits`."""

TaskKey = tuple[int, int]
"""(entity index in the checkpoint's ``entities``, task index in that entity's ``tasks``)."""


@dataclasses.dataclass
class ForkResult:
    """What :func:`fork_with_edits` prepared: the restored entity (call ``kickoff``), the new branch, the id
    of the fork's first checkpoint (None if that write failed; CrewAI logs it), and which tasks will run
    again (``rerun``) as (entity index, task index) pairs."""

    entity: Any
    branch: str
    fork_commit: str | None
    rerun: list[TaskKey]


def fork_with_edits(rev: str, *, store: Any, branch: str | None = None,
                    inputs: Mapping[str, Any] | None = None,
                    task_outputs: Mapping[TaskKey, str] | None = None, cls: Any = None) -> ForkResult:
    """Restore checkpoint ``rev`` on a new branch, apply edits, record the edited state as the branch's
    first checkpoint, and return the entity ready for ``kickoff``.

    Args:
        rev: any revision of the store.
        store: store folder or :class:`crewckpt.Store` on disk.
        branch: new branch name (None: ``fork/<id[:12]>_<6 hex>``).
        inputs: kickoff inputs to record (``checkpoint_inputs`` of every crew/flow); pass the same to kickoff.
        task_outputs: new raw output text per completed task, keyed by (entity index, task index).
        cls: class to restore into (see :func:`crewckpt.crewai.restore`; e.g. the Flow subclass).
    Returns:
        :class:`ForkResult`.
    Raises:
        BadRefName, BranchExists: bad or taken branch name. UnknownRevision: ``rev``.
        ValueError: an edited task is not a completed task of a crew in the checkpoint.
    """
    from crewai.events.event_bus import crewai_event_bus

    from crewckpt.crewai import _store_path, checkpoint, restore

    path = _store_path(store)
    entity = restore(rev, store=path, cls=cls, fork=branch if branch else True)
    state = crewai_event_bus._runtime_state
    roots = list(state.root) if state is not None else [entity]
    rerun = apply_task_edits(roots, task_outputs or {})
    if inputs is not None:
        for root in roots:
            if getattr(root, "entity_type", None) in ("crew", "flow") and hasattr(root, "checkpoint_inputs"):
                root.checkpoint_inputs = dict(inputs)
                if hasattr(root, "_inputs"):  # a crew's snapshot copies _inputs into checkpoint_inputs
                    root._inputs = dict(inputs)
    new_branch = str(getattr(state, "_branch", None) or branch or "")
    commit = checkpoint(state, os.fspath(path), trigger=FORK_TRIGGER) if state is not None else None
    return ForkResult(entity, new_branch, commit, rerun)


def apply_task_edits(roots: list[Any], task_outputs: Mapping[TaskKey, str]) -> list[TaskKey]:
    """Set edited outputs on restored crews and invalidate the tasks after them (module docstring).

    ``roots`` is the restored RuntimeState's ``root`` list (same order as the document's ``entities``).
    Returns the invalidated (entity index, task index) pairs. Raises ValueError for a bad key.
    """
    rerun: list[TaskKey] = []
    by_entity: dict[int, dict[int, str]] = {}
    for (ent, idx), text in task_outputs.items():
        by_entity.setdefault(ent, {})[idx] = text
    for ent, edits in sorted(by_entity.items()):
        if not 0 <= ent < len(roots) or not getattr(roots[ent], "tasks", None):
            raise ValueError(f"entity {ent} of the checkpoint is not a crew with tasks")
        rerun += [(ent, t) for t in _edit_crew(roots[ent], edits)]
    return rerun


def _edit_crew(crew: Any, edits: Mapping[int, str]) -> list[int]:
    tasks = crew.tasks
    edited_agents: set[int] = set()
    for idx, text in edits.items():
        if not 0 <= idx < len(tasks) or tasks[idx].output is None:
            raise ValueError(f"task {idx + 1} of crew {getattr(crew, 'name', '?')!r} has no output to edit")
        tasks[idx].output.raw = text
        agent = tasks[idx].agent
        if agent is not None and _patch_last_answer(agent, tasks[:idx], text):
            edited_agents.add(id(agent))
    rerun = []
    for idx in range(min(edits) + 1, len(tasks)):
        task = tasks[idx]
        if idx not in edits:
            if task.output is not None or task.start_time is not None:
                rerun.append(idx)
            task.output = None
            task.start_time = None
            task.end_time = None
        executor = getattr(task.agent, "agent_executor", None) if task.agent is not None else None
        if executor is not None:
            executor._resuming = False  # run the task from its start, not from a stale conversation
            if id(task.agent) not in edited_agents:
                executor.messages = []
    return rerun


def _patch_last_answer(agent: Any, earlier: list[Any], text: str) -> bool:
    """Replace the agent's final answer of the edited task in its executor's messages (CrewAI's rule: the
    n-th system message starts the agent's n-th task). False when the agent has no live executor."""
    executor = getattr(agent, "agent_executor", None)
    if executor is None or not getattr(executor, "messages", None):
        return False
    nth = sum(1 for t in earlier if t.agent is agent)
    messages = executor.messages
    starts = [i for i, m in enumerate(messages) if m.get("role") == "system"]
    if nth >= len(starts):
        return False
    end = starts[nth + 1] if nth + 1 < len(starts) else len(messages)
    for j in range(end - 1, starts[nth], -1):
        if messages[j].get("role") == "assistant":
            messages[j]["content"] = text
            return True
    return False


__all__ = ["FORK_TRIGGER", "ForkResult", "TaskKey", "apply_task_edits", "fork_with_edits"]
