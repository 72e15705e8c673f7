"""`ckpt tui`: open the checkpoint browser (also what `ckpt` with no verb does)."""

from __future__ import annotations

from collections.abc import Callable

import click

from crewckpt.cli.context import crewai_location, crewai_store_hint, obj


def tui_store_path(store_path: str | None, confirm: Callable[[str], bool] = click.confirm) -> str | None:
    """The store the browser opens: ``store_path`` (None: ``$CKPT_STORE`` / the nearest ``.ckpt``) as it
    is, unless it holds CrewAI checkpoints: then ``confirm(question)`` is asked, and on yes they are imported
    into the nearest ``.ckpt`` above the working folder (``./.ckpt``, created, when there is none), whose
    path is returned. Nothing is ever written into the CrewAI folder or db.

    Raises:
        StoreNotFound: the user declined (the message says how to import them).
    """
    from crewckpt.backends import registry
    from crewckpt.backends.sqlite import DEFAULT_DIR, discover
    from crewckpt.errors import StoreNotFound
    from crewckpt.history.store import Store
    from crewckpt.views import transfer
    from crewckpt.views.document import CREWAI

    named = registry.named(store_path)
    hint = crewai_store_hint(named)
    if named is None or hint is None:
        return store_path
    try:
        dest = registry.identity(discover())
    except StoreNotFound:
        dest = registry.identity(DEFAULT_DIR)
    if not confirm(f"{named} is {crewai_location(named)}, not a crewckpt store. Import it into {dest} and "
                   f"browse that?"):
        raise StoreNotFound(hint)
    store = Store.open(dest, create=True, profile=CREWAI)
    with store:
        report = transfer.import_checkpoints(store, str(named))
    click.echo(report.summary(), err=True)
    return dest


@click.command("tui")
@click.option(
    "--store",
    "store_path",
    metavar="LOCATION",
    help="Store to browse: a folder, sqlite:PATH or a backend URL (default: the global --store, $CKPT_STORE, else "
    "the nearest .ckpt).",
)
def tui(store_path: str | None) -> None:
    """Browse checkpoints in a terminal UI: branch tree, details, diff, edit, fork and resume.

    Browsing and diffing work without CrewAI; Fork and Resume need the crewai extra and run in this
    terminal after the browser closes (docs/tui.md).

    \b
    Examples:
      ckpt                      # same as `ckpt tui`
      ckpt tui --store runs/.ckpt
    """
    import sys

    from crewckpt.errors import CkptError
    from crewckpt.tui import run

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise CkptError(
            "`ckpt tui` needs a terminal (stdin and stdout are not one); for scripts use "
            "`ckpt log --graph`, `ckpt show` and `ckpt diff`"
        )
    run(tui_store_path(store_path if store_path is not None else obj().store_path))
