"""Run what the browser asked for (Resume or Fork) in the terminal, after the app has exited.

The browser never runs CrewAI inside the Textual screen: a run can take minutes with real LLMs, CrewAI's
verbose console output (rich panels and live trees) assumes it owns the terminal, and Ctrl-C must stop the run
the usual way (docs/tui.md, 'Where runs happen'). ``crewai`` is imported only here, only when a run starts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from crewckpt.errors import INSTALL_HINT, CkptError, CrewAIMissing, crewai_available, require_crewai


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What to run when the app exits. ``action`` is ``"resume"`` or ``"fork"``; ``rev`` a full commit id;
    ``branch`` the fork's new branch; ``inputs`` kickoff inputs (None: the recorded ones); ``task_outputs``
    edited outputs keyed by (entity index, task index)."""

    action: str
    rev: str
    branch: str | None = None
    inputs: dict[str, Any] | None = None
    task_outputs: dict[tuple[int, int], str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RunOutcome:
    """Result of :func:`execute`: the restored entity, its kickoff result, the branch the run wrote on, the
    fork's first checkpoint (forks only), the tasks the edits sent back to run, and the run's last checkpoint
    (``head``: the restored one when the run wrote none; None when unknown)."""

    entity: Any
    result: Any
    branch: str | None
    fork_commit: str | None
    rerun: list[tuple[int, int]]
    head: str | None = None


def execute(plan: RunPlan, store_path: str, echo: Callable[[str], None] = print) -> RunOutcome:
    """Restore ``plan.rev`` from the store at ``store_path`` and run it to the end in this process.

    Fork: :func:`crewckpt.crewai.edits.fork_with_edits` (edited outputs invalidate later tasks; the edited
    state becomes the new branch's first checkpoint), then ``kickoff(inputs=plan.inputs)``. Resume: CrewAI's
    ``from_checkpoint`` on the checkpoint's branch and ``kickoff()``. A standalone Agent is kicked off with
    :data:`crewckpt.crewai.run.AGENT_RESUME_MESSAGE` (its recorded conversation continues; inputs do not apply).

    Raises:
        CrewAIMissing, and whatever restore or the run raises (UnknownRevision, BranchExists, ValueError...).
    """
    require_crewai(plan.action.title())
    from crewckpt.crewai import restore
    from crewckpt.crewai.edits import fork_with_edits
    from crewckpt.crewai.run import restore_class, run_restored, tty_confirm
    from crewckpt.crewai.writer import open_store
    from crewckpt.views.document import crewai_json

    store = open_store(store_path)
    # a flow's recorded class is imported only with the user's opt-in: the variable, or a yes at a prompt
    # here in the terminal (the app has closed); no terminal: one line refusing, nothing imported
    try:
        cls = restore_class(crewai_json(store.read(plan.rev), plan.rev[:12]), store.info(plan.rev).meta,
                            confirm=tty_confirm())
    except CkptError as exc:
        raise CkptError(f"cannot {plan.action} {plan.rev[:12]}: {exc}") from None
    fork_commit = None
    rerun: list[tuple[int, int]] = []
    if plan.action == "fork":
        forked = fork_with_edits(plan.rev, store=store_path, branch=plan.branch, inputs=plan.inputs,
                                 task_outputs=plan.task_outputs, cls=cls)
        entity, branch, fork_commit, rerun = forked.entity, forked.branch, forked.fork_commit, forked.rerun
        echo(f"Forked {plan.rev[:12]} onto branch {branch}"
             + (f" (first checkpoint {fork_commit[:12]})" if fork_commit else ""))
        for (_ei, ti), text in sorted(plan.task_outputs.items()):
            echo(f"  edited output of task {ti + 1}: {_preview(text)}")
        if rerun:
            echo(f"  tasks to run again: {', '.join(str(t + 1) for _, t in rerun)}")
    elif plan.action == "resume":
        entity = restore(plan.rev, store=store_path, cls=cls)
        branch = None
        echo(f"Resuming {type(entity).__name__} from {plan.rev[:12]}")
    else:
        raise ValueError(f"unknown action {plan.action!r}: expected 'resume' or 'fork'")
    if plan.inputs:
        echo("  inputs: " + ", ".join(f"{k}={_preview(str(v), 40)}" for k, v in plan.inputs.items()))
    run = run_restored(entity, plan.inputs)
    output = getattr(run.result, "raw", run.result)
    if output is not None:
        echo("")
        echo(str(output))
    return RunOutcome(entity, run.result, run.branch or branch, fork_commit, rerun, run.checkpoint_id)


def _preview(text: str, width: int = 70) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


__all__ = ["INSTALL_HINT", "CrewAIMissing", "RunOutcome", "RunPlan", "crewai_available", "execute",
           "require_crewai"]
