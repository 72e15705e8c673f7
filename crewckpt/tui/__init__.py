"""crewckpt.tui: the checkpoint browser (Textual). ``ckpt`` with no verb and ``ckpt tui`` call :func:`run`.

Browsing and diffing need only the store; Resume and Fork need the crewai extra and run in the terminal after
the app exits (docs/tui.md). Importing this package imports neither Textual nor crewai.
"""

from __future__ import annotations

from collections.abc import Callable


def run(store_path: str | None = None, echo: Callable[[str], None] | None = None) -> None:
    """Open the browser on a store (``store_path``: any store location, else ``$CKPT_STORE``, else the nearest
    ``.ckpt``); when the
    user confirms Fork or Resume, run it here in the terminal once the app has closed.

    Raises:
        StoreNotFound, FormatVersionError: no usable store (one-line messages; the CLI prints them).
        CrewAIMissing: Fork/Resume confirmed without crewai (the app checks first, so only on a race).
        Whatever the run raises (a crew's own errors propagate like ``ckpt resume``).
    """
    import click

    from crewckpt.errors import CkptError
    from crewckpt.history.head import follow_run
    from crewckpt.history.store import Store
    from crewckpt.tui.app import CheckpointBrowser
    from crewckpt.tui.runner import execute
    from crewckpt.views.document import CREWAI

    out = echo or click.echo
    with Store.open(store_path, profile=CREWAI) as store:
        plan = CheckpointBrowser(store).run()
        path = store.location
    if plan is None:
        return
    if path is None:  # not reachable from the CLI: an anonymous memory store cannot be reopened to run
        raise CkptError("Fork and Resume need a store they can reopen; use a folder or memory:NAME")
    outcome = execute(plan, path, echo=out)
    head = outcome.head or plan.rev  # the run's own last checkpoint, not the store's HEAD
    with Store.open(path, profile=CREWAI) as store:
        branch = outcome.branch or store.info(head).branch
        switched = follow_run(store, outcome.branch, outcome.head, plan.rev)  # HEAD follows, as `ckpt resume`
    out("")
    out(f"Done: latest checkpoint {head[:12]} on branch {branch}. Run `ckpt` to browse, "
        f"`ckpt diff {plan.rev[:12]} {head[:12]}` to compare." + (f" HEAD is now on {branch}." if switched else ""))


__all__ = ["run"]
