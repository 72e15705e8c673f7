"""`ckpt tui`: open the checkpoint browser (also what `ckpt` with no verb does)."""

from __future__ import annotations

import click

from crewckpt.cli.context import obj


@click.command("tui")
@click.option(
    "--store",
    "store_path",
    metavar="PATH",
    help="Store to browse (default: the global --store, $CKPT_STORE, else the nearest .ckpt).",
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
    run(store_path if store_path is not None else obj().store_path)
