"""`ckpt`: git-like command line for crewckpt stores (console script entry point `main`).

Exit status: 0 ok, 1 failure (unknown revision, store not found, integrity error...), 2 usage error
(bad option, bad branch name, bad JSON path or duration). Errors are one line on stderr naming the
problem and the fix (a JSON object with --json); `--debug` adds the traceback.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

import click

from crewckpt.cli.context import AppContext, UsageProblem
from crewckpt.cli.fmt import safe_text

EPILOG = """\b
Examples:
  ckpt init                      create .ckpt in the working directory
  ckpt log --graph --all         every branch, with fork points
  ckpt diff main fork/a1b2c3d4   what a fork changed
  ckpt show main~2 --path entities[0].tasks[1].output.raw
The store is --store LOCATION, else $CKPT_STORE, else the nearest .ckpt above the working directory.
A location is a folder (or sqlite:PATH) or a backend URL such as postgresql://host/db or s3://bucket/prefix.
"""


def interactive() -> bool:
    """True when stdin and stdout are terminals: only then does `ckpt` alone open the TUI."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def launch_tui(ctx: click.Context) -> bool:
    """Hook for `ckpt` with no verb: open the TUI (``crewckpt.tui.run(store_path)``) on a terminal.

    Returns False (so help is printed) when not interactive (a pipe, a script, a test) or when the TUI is
    not available (no ``run`` in crewckpt.tui, or Textual cannot be imported).
    """
    if not interactive():
        return False
    try:
        from crewckpt import tui
    except ImportError:
        return False
    run = getattr(tui, "run", None)
    if run is None:
        return False
    from crewckpt.cli.cmd_tui import tui_store_path

    run(tui_store_path(ctx.obj.store_path))
    return True


class CkptGroup(click.Group):
    """Click group that turns crewckpt errors into one-line messages and the exit codes above."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)  # registration order: the order a user learns them in

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Click's main, but usage errors (bad option, missing argument, bad value) are one line too:
        ``ckpt: error: No such option '--x'; see `ckpt log --help```, exit status 2."""
        argv = list(sys.argv[1:] if args is None else args)
        # --json and a redirected --raw are exact bytes (docs/cli-json.md; `ckpt show --raw > cp.json`)
        # `resume` hands the terminal to CrewAI, whose live console moves the cursor (crewckpt prints only ids)
        exact = "--json" in argv or ("--raw" in argv and not sys.stdout.isatty()) or _verb(argv) == "resume"
        with terminal_guard(json_output=exact):
            if not standalone_mode:
                return super().main(args, prog_name, complete_var, False, **extra)
            self._standalone(args, prog_name, complete_var, argv, **extra)

    def _standalone(self, args: Sequence[str] | None, prog_name: str | None, complete_var: str | None,
                    argv: list[str], **extra: Any) -> None:
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.ClickException as exc:
            _report_click_error(exc, "--json" in argv, argv)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("ckpt: aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            # every write is one transaction (or, for transfers and gc, ordered so a rerun finishes it)
            click.echo("ckpt: interrupted; the store is consistent: run the command again to finish it", err=True)
            ctx.exit(130)
        except BrokenPipeError:  # `ckpt log | head`
            sys.stderr.close()
            ctx.exit(0)
        except Exception as exc:  # noqa: BLE001 - the one place where every error becomes a message
            app = ctx.find_object(AppContext)
            if app is not None and app.debug:
                traceback.print_exc()
            code, message = describe_error(exc)
            if app is not None and app.debug is False and code == 1 and not _is_ckpt_error(exc):
                message += " (run with --debug for the traceback)"
            if app is not None and app.json:
                from crewckpt.history import jsontext

                payload = {"error": {"type": type(exc).__name__, "message": message, "exit_code": code}}
                click.echo(jsontext.dumps(payload), err=True)
            else:
                click.echo(f"ckpt: error: {safe_text(message)}", err=True)
            ctx.exit(code)
        finally:
            app = ctx.find_object(AppContext)
            if app is not None:
                app.close()


def _verb(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (skipping the group's options and --store's value), or None."""
    it = iter(argv)
    for arg in it:
        if arg == "--store":
            next(it, None)
        elif not arg.startswith("-"):
            return arg
    return None


@contextlib.contextmanager
def terminal_guard(json_output: bool) -> Iterator[None]:
    """Route stdout and stderr through :class:`crewckpt.cli.fmt.TerminalSafeStream` for one invocation, so no
    stored text reaches a terminal (or a pipe into one) raw, in any colour mode. ``json_output``: stdout is
    left exact (JSON escapes what it must; docs/cli-json.md), stderr's JSON errors are ASCII-safe already."""
    from crewckpt.cli.context import wants_color
    from crewckpt.cli.fmt import TerminalSafeStream

    real_out, real_err = sys.stdout, sys.stderr
    if not json_output and not isinstance(real_out, TerminalSafeStream):
        sys.stdout = TerminalSafeStream(real_out, keep_sgr=wants_color(real_out))  # type: ignore[assignment]
    if not isinstance(real_err, TerminalSafeStream):
        sys.stderr = TerminalSafeStream(real_err, keep_sgr=wants_color(real_err))  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = real_out, real_err


def _global_option_hint(exc: click.ClickException, argv: list[str]) -> str | None:
    """For a verb's "No such option" that is an option of ``ckpt`` itself (``ckpt gc --store X``): the line
    saying where it goes, with the command rewritten (``ckpt --store X gc``); else None."""
    ctx = getattr(exc, "ctx", None)
    if not isinstance(exc, click.NoSuchOption) or ctx is None or ctx.parent is None:
        return None
    name = exc.option_name
    opt = next((p for p in ctx.find_root().command.params if isinstance(p, click.Option) and name in p.opts), None)
    if opt is None:
        return None
    at = [i for i, a in enumerate(argv) if a == name or a.startswith(name + "=")]
    if not at:
        return f"{name} is an option of ckpt itself: write it before the command (`ckpt {name} ... COMMAND`)"
    i = at[-1]  # the one after the verb (one before it parsed fine)
    take = 1 if opt.is_flag or "=" in argv[i] else 2
    moved = argv[i:i + take]
    if take == 2 and (len(moved) < 2 or moved[1].startswith("-")):  # its value is missing: show where it goes
        moved, take = [argv[i], opt.metavar or (opt.name or "value").upper()], 1
    words = [_secretless_arg(a) for a in ["ckpt", *moved, *argv[:i], *argv[i + take:]]]
    return f"{name} is an option of ckpt itself: write `{shlex.join(words)}`"


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://")


def _secretless_arg(arg: str) -> str:
    """One command-line word with the secrets of the location in it masked, the word taken whole: scrubbing
    the joined command line would end a URL at the quote or space shell quoting put into it."""
    from crewckpt.backends.registry import redact

    m = _SCHEME.search(arg)
    return arg if m is None else arg[:m.start()] + redact(arg[m.start():])


def _report_click_error(exc: click.ClickException, json_asked: bool, argv: Sequence[str] = ()) -> None:
    ctx = getattr(exc, "ctx", None)
    message = " ".join(exc.format_message().split())
    moved = _global_option_hint(exc, list(argv))
    if moved is not None:
        message = moved
    elif isinstance(exc, click.UsageError):
        joint = " See" if message.endswith("?") else "; see"  # "Did you mean 'stats'? See ..." (no "?;")
        message = f"{message.rstrip('.')}{joint} `{ctx.command_path if ctx is not None else 'ckpt'} --help`"
    app = ctx.find_object(AppContext) if ctx is not None else None
    if (app is not None and app.json) or json_asked:
        from crewckpt.history import jsontext

        payload = {"error": {"type": type(exc).__name__, "message": message, "exit_code": exc.exit_code}}
        click.echo(jsontext.dumps(payload), err=True)
    else:
        click.echo(f"ckpt: error: {safe_text(message)}", err=True)


def describe_error(exc: BaseException) -> tuple[int, str]:
    """(exit status, one-line message) for an exception raised by a verb."""
    from crewckpt import errors
    from crewckpt.backends.registry import scrub

    # scrub: no password or key from a location URL quoted by any layer reaches the terminal or a log
    message = scrub(" ".join(str(exc).split()) or type(exc).__name__)
    if isinstance(exc, (errors.BadRefName, errors.BadLocation)):
        return 2, message
    if isinstance(exc, errors.CkptError):
        return 1, message
    from crewckpt.history.jsonpath import JsonPathError

    if isinstance(exc, JsonPathError):
        return 1, message
    if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return 1, f"{exc.strerror}: {exc.filename}"
    return 1, f"unexpected {type(exc).__name__}: {message}"


def _is_ckpt_error(exc: BaseException) -> bool:
    from crewckpt import errors
    from crewckpt.history.jsonpath import JsonPathError

    return isinstance(exc, (errors.CkptError, JsonPathError, OSError))


@click.group(
    name="ckpt",
    cls=CkptGroup,
    invoke_without_command=True,
    epilog=EPILOG,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--store",
    "store_path",
    envvar="CKPT_STORE",
    metavar="LOCATION",
    help="Store to use: a folder, sqlite:PATH or a backend URL (postgresql://..., s3://...); default: "
    "$CKPT_STORE, else the nearest .ckpt above the working directory.",
)
@click.option("--debug", is_flag=True, help="Show the full traceback on errors.")
@click.option("--no-pager", "no_pager", is_flag=True, help="Do not page long output on a terminal.")
@click.option(
    "--json", "as_json", is_flag=True, help="Machine-readable output (same as COMMAND --json; docs/cli-json.md)."
)
@click.version_option(package_name="crewckpt", prog_name="ckpt")
@click.pass_context
def cli(ctx: click.Context, store_path: str | None, debug: bool, no_pager: bool, as_json: bool) -> None:
    """crewckpt: git for CrewAI checkpoints.

    Immutable, deduplicated, compressed checkpoints of crews, flows and agents, with branches, log,
    diff, fork and resume. Run `ckpt COMMAND --help` for each command's options and examples.
    """
    ctx.obj = AppContext(store_path, debug, pager=not no_pager)
    ctx.obj.json = as_json
    if ctx.invoked_subcommand is None and not launch_tui(ctx):
        click.echo(ctx.get_help())


SHORT_HELP = {
    "init": "Create an empty store.",
    "log": "Show history (--graph --all like git).",
    "list": "List checkpoints, newest first (or a CrewAI PATH).",
    "info": "Show one checkpoint's metadata (or a CrewAI PATH).",
    "rev-parse": "Print the full id a revision names.",
    "show": "Print a checkpoint document or one part of it.",
    "diff": "Semantic diff of two checkpoints.",
    "branch": "List, create, delete or rename branches.",
    "fork": "Start a branch at a checkpoint.",
    "switch": "Make a branch the current branch (HEAD).",
    "checkout": "Same as switch (git's older spelling).",
    "reflog": "Where HEAD or a branch has pointed (HEAD@{N}).",
    "resume": "Restore and run a checkpoint (needs crewai).",
    "prune": "Remove old checkpoints from branches.",
    "gc": "Free the space of unreachable objects.",
    "fsck": "Verify the store's integrity.",
    "stats": "Sizes, dedup and compression ratios.",
    "import": "Import CrewAI JSON/SQLite checkpoints.",
    "export": "Write checkpoints in CrewAI's layouts.",
    "tui": "Browse checkpoints in a terminal UI.",
    "remote": "List, add or remove remotes.",
    "clone": "Copy a store (every branch) into a new one.",
    "fetch": "Bring a remote's branches as origin/BRANCH.",
    "pull": "Fetch and fast-forward a branch.",
    "push": "Send a branch to a remote (fast-forward).",
    "publish": "Publish runs (refs/runs/ID) to a shared store.",
}


def _register() -> None:
    from crewckpt.cli import cmd_branch, cmd_crewai, cmd_history, cmd_maint, cmd_remote, cmd_tui

    for command in (
        cmd_history.init,
        cmd_history.log,
        cmd_history.list_,
        cmd_history.info,
        cmd_history.rev_parse,
        cmd_history.show,
        cmd_history.diff,
        cmd_branch.branch,
        cmd_branch.switch,
        cmd_branch.checkout,
        cmd_branch.fork,
        cmd_branch.reflog,
        cmd_crewai.resume,
        cmd_maint.prune,
        cmd_maint.gc,
        cmd_maint.fsck,
        cmd_maint.stats,
        cmd_crewai.import_,
        cmd_crewai.export,
        cmd_tui.tui,
        cmd_remote.remote,
        cmd_remote.clone,
        cmd_remote.fetch,
        cmd_remote.pull,
        cmd_remote.push,
        cmd_remote.publish,
    ):
        command.short_help = SHORT_HELP[command.name or ""]
        cli.add_command(command)


_register()


def main(argv: list[str] | None = None) -> None:
    """Console script entry point: ``ckpt``."""
    cli.main(args=argv, prog_name="ckpt")


__all__ = ["UsageProblem", "cli", "describe_error", "launch_tui", "main"]


if __name__ == "__main__":  # python -m crewckpt.cli.main
    main()
