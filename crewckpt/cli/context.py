"""What every `ckpt` verb shares: the store (opened once, lazily), consoles, JSON output, errors.

Paging (git's rule): on a terminal, the long outputs (log, list, diff, show, reflog) go through
$CKPT_PAGER, else $PAGER, else `less` (with LESS=FRX unless LESS is set: quit if one screen, keep colours,
keep the text on screen); `--no-pager`, or a pager of "" or "cat", turns it off.

Colour (the rules rich and https://no-color.org use): NO_COLOR set and non-empty -> never; else
FORCE_COLOR set and non-empty -> always; else only when the stream is a terminal (and TERM is not "dumb").
Lines are written directly (no wrapping), coloured with a handful of ANSI codes (:func:`paint`): `ckpt list`
on 10,000 commits stays fast. rich is used only for `show`'s JSON highlighting and for progress bars
(stderr, on a terminal only).
"""

from __future__ import annotations

import functools
import io
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from crewckpt.cli.fmt import safe_text, terminal_safe
from crewckpt.history import jsontext

if TYPE_CHECKING:
    from rich.console import Console

    from crewckpt.history.store import Store


class UsageProblem(click.UsageError):
    """A bad argument value found after parsing (bad branch name, bad JSON path...): exit status 2."""


def memory_problem(location: str | os.PathLike[str] | None, *, missing: bool = False,
                   anonymous_only: bool = False) -> str | None:
    """Why the CLI cannot use ``location`` when it is a ``memory:`` store, else None (one line, with the fix).

    A memory store lives inside one Python process: each `ckpt` command is a new process, so a store it
    creates is gone when it exits, and a ``memory:NAME`` a program made is not visible to it (only code in
    the same process, e.g. click's test runner, shares one). ``missing``: say that no such store was found;
    ``anonymous_only``: None for ``memory:NAME`` (only ``memory:``, a new empty store at each open).
    """
    from crewckpt.backends import registry
    from crewckpt.errors import BadLocation

    if location is None:
        return None
    try:
        loc = registry.parse(location)
    except BadLocation:
        return None
    if loc.scheme != "memory" or (anonymous_only and loc.target):
        return None
    what = f"no in-memory store named {loc.target!r}: " if missing else ""
    return (f"{loc.text}: {what}a memory store lives only inside one Python process, so a `ckpt` command (a "
            f"process of its own) can neither keep nor find one; use a folder (e.g. .ckpt) or sqlite:PATH")


def _one_line(text: str) -> str:
    return text.replace("\n", "\\n").replace("\r", "\\r") if "\n" in text or "\r" in text else text


class AppContext:
    """Per-invocation state, reachable from every command as ``click.get_current_context().obj``."""

    def __init__(self, store_path: str | None, debug: bool, pager: bool = True) -> None:
        self.store_path = store_path
        self.debug = debug
        self.pager = pager
        self.json = False  # set by --json before the command runs, so errors come out as JSON too
        self._store: Store | None = None
        self._out: Console | None = None
        self._err: Console | None = None
        self.color = wants_color(sys.stdout)

    def store(self, *, create: bool = False) -> Store:
        """The store named by --store / CKPT_STORE, or found by walking up from the working directory.

        With ``create``, a store that does not exist yet is created (at --store / CKPT_STORE, else
        ``./.ckpt``) and a note goes to stderr; never inside a folder of CrewAI checkpoints.

        Raises:
            StoreNotFound: no store; when the path holds CrewAI checkpoints the message says to import them.
        """
        if self._store is None:
            from crewckpt.backends import registry
            from crewckpt.errors import BadLocation, StoreNotFound
            from crewckpt.history.store import DEFAULT_DIR, Store
            from crewckpt.views.document import CREWAI

            named = registry.named(self.store_path)
            memory = memory_problem(named, anonymous_only=True)  # memory: alone: a new empty store at each open
            if memory is not None:
                raise BadLocation(memory)
            try:  # the CrewAI profile: what `ckpt import` and an index rebuild record
                self._store = Store.open(self.store_path, profile=CREWAI)
            except StoreNotFound as exc:
                memory = memory_problem(named, missing=True)
                if memory is not None:
                    raise StoreNotFound(memory) from None
                hint = crewai_store_hint(named)
                if hint is not None:
                    raise StoreNotFound(hint) from None
                target = os.fspath(named or DEFAULT_DIR)
                if not create or registry.occupied(target):
                    raise StoreNotFound(_with_crewai_nearby(str(exc))) from None
                self._store = Store.init(target, profile=CREWAI)
                click.echo(f"ckpt: created the store {target}", err=True)
        return self._store

    def command(self, *args: str) -> str:
        """A ``ckpt`` command line to print as a next step: ``ckpt [--store PATH] ARGS...`` (shell-quoted).

        ``--store`` is included when this invocation named its store with ``--store`` (a bare command would
        look for a store from the current folder instead, maybe another one or none). An argument made only
        of ``[...]`` placeholders (``"[--inputs JSON]"``) is kept as it is.
        """
        words = ["ckpt", *(["--store", self.store_path] if self.store_path else []), *args]
        return " ".join(w if w.startswith("[") and w.endswith("]") else shlex.quote(w) for w in words)

    def close(self) -> None:
        """Release the store (its database connection) if a command opened it."""
        store, self._store = self._store, None
        close = getattr(store, "close", None)
        if close is not None:
            close()

    @property
    def out(self) -> Console:
        """Console on stdout (colour only on a terminal, never with NO_COLOR)."""
        if self._out is None:
            self._out = _console(sys.stdout)
        return self._out

    @property
    def err(self) -> Console:
        """Console on stderr, for progress bars and warnings."""
        if self._err is None:  # progress bars need their cursor codes: the unfiltered stream
            self._err = _console(getattr(sys.stderr, "unfiltered", sys.stderr))
        return self._err

    def line(self, text: str = "", style: str | None = None) -> None:
        """Print one line of human output, styled when stdout takes colour (text is never interpreted)."""
        sys.stdout.write((paint(text, style) if self.color else text) + "\n")

    def styled(self, parts: Iterable[tuple[str, str | None]]) -> None:
        """Print one line assembled from (text, style) parts; a newline or carriage return in a part (a name or
        trigger from a checkpoint someone sent) is shown escaped, so one record stays one line."""
        parts = [(_one_line(text), style) for text, style in parts]
        if self.color:
            sys.stdout.write("".join(paint(text, style) for text, style in parts) + "\n")
        else:
            sys.stdout.write("".join(text for text, _ in parts) + "\n")

    @contextmanager
    def paged(self) -> Iterator[None]:
        """Send what the block prints to stdout through the pager (see the module docstring), if any."""
        command = pager_command() if self.pager and not self.json else None
        if command is None:
            yield
            return
        from rich.console import Console

        real, buffer = sys.stdout, io.StringIO()
        width = Console(file=real).width
        self._out = Console(
            file=buffer, highlight=False, soft_wrap=True, emoji=False, force_terminal=self.color,
            no_color=not self.color, width=width,
        )  # fmt: skip
        sys.stdout = buffer
        try:
            yield
        finally:
            sys.stdout = real
            self._out = None
        run_pager(command, terminal_safe(buffer.getvalue(), keep_sgr=self.color), real)

    @contextmanager
    def progress(self, description: str, total: int | None = None) -> Iterator[Any]:
        """A rich progress bar on stderr (hidden unless stderr is a terminal).

        Yields the store's progress callback ``update(phase, done, total or None)`` (counts of objects).
        """
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            transient=True,
            disable=not self.err.is_terminal,
        ) as bar:
            task = bar.add_task(description, total=total)

            def update(phase: str, done: int, total: int | None = None) -> None:
                bar.update(task, description=f"{description}: {phase}", completed=done, total=total)

            yield update


# The few styles the CLI uses, as ANSI SGR codes: writing them directly keeps 10,000 coloured lines fast
# (rich renders each line through its whole pipeline; it is still used for `show`'s JSON and progress bars).
_SGR = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "cyan": "36",
    "bold cyan": "1;36",
}


def paint(text: str, style: str | None) -> str:
    """``text`` wrapped in the ANSI codes of ``style`` (one of _SGR's keys; others print plain).

    Control characters in ``text`` (escape sequences from a checkpoint's data) are shown as ``\\x1b``
    so they cannot restyle or move the terminal.
    """
    text = safe_text(text, tabs=True)  # also C1, bidi and zero-width characters (crewckpt.cli.fmt)
    code = _SGR.get(style) if style and text else None
    return f"\x1b[{code}m{text}\x1b[0m" if code else text


def crewai_location(path: str | os.PathLike[str]) -> str | None:
    """What CrewAI checkpoints ``path`` holds ("a CrewAI SQLite db", "a CrewAI JSON checkpoint", "a folder
    of CrewAI JSON checkpoints"), or None (not CrewAI's, or a crewckpt store). Looks at file names only, at
    most a few hundred entries three levels deep, so it is cheap on any folder."""
    from pathlib import Path

    from crewckpt.backends import registry
    from crewckpt.backends.sqlite import is_store_db
    from crewckpt.views.layout import is_sqlite_file, parse_filename

    local = registry.local_folder(path)
    if local is None:  # memory: or a URL store: never CrewAI's
        return None
    p = Path(local)
    try:
        if p.is_file():
            if is_sqlite_file(p):  # a store's own store.db is not CrewAI's: opening says which folder to give
                return None if is_store_db(p) else "a CrewAI SQLite db"
            return "a CrewAI JSON checkpoint" if p.suffix == ".json" and parse_filename(p.name) else None
        if not p.is_dir() or registry.has_store(p):
            return None
        folders, budget = [(p, 0)], 400
        while folders and budget > 0:
            folder, depth = folders.pop()
            with os.scandir(folder) as entries:
                for entry in entries:
                    budget -= 1
                    if budget <= 0:
                        break
                    if entry.name.endswith(".json") and parse_filename(entry.name) \
                            and entry.is_file(follow_symlinks=False):
                        return "a folder of CrewAI JSON checkpoints"
                    if depth < 3 and entry.is_dir(follow_symlinks=False):
                        folders.append((Path(entry.path), depth + 1))
    except OSError:
        return None
    return None


def crewai_store_hint(path: str | os.PathLike[str] | None) -> str | None:
    """The one-line error for a store path that holds CrewAI checkpoints (pointing at `ckpt import`), or
    None when ``path`` is None or does not hold them."""
    if path is None:
        return None
    what = crewai_location(path)
    if what is None:
        return None
    return (f"{os.fspath(path)} is {what}, not a crewckpt store; import it with `ckpt import {os.fspath(path)}` "
            f"(into ./.ckpt, created if missing), or list it as it is with `ckpt list {os.fspath(path)}`")


def _with_crewai_nearby(message: str) -> str:
    """``message`` plus the `ckpt import` hint when the working folder has CrewAI's default ./.checkpoints."""
    if crewai_location(".checkpoints") is not None:
        return message + "; CrewAI checkpoints are in ./.checkpoints: import them with `ckpt import ./.checkpoints`"
    return message


def try_resolve(store: Store, rev: str) -> str | None:
    """``store.resolve(rev)``, or None when it names nothing (e.g. HEAD in an empty store)."""
    from crewckpt.errors import CkptError

    try:
        return store.resolve(rev)
    except CkptError:
        return None


def stdout_is_terminal() -> bool:
    """Whether stdout is a terminal (the condition for paging)."""
    return sys.stdout.isatty()


def pager_command() -> str | None:
    """The pager to run, or None: not a terminal, paging turned off ("" or "cat"), or its program is not
    installed (then output is printed as usual)."""
    import shlex
    import shutil

    if not stdout_is_terminal():
        return None
    command = os.environ.get("CKPT_PAGER", os.environ.get("PAGER", "less"))
    try:
        program = shlex.split(command)[0] if command.strip() else ""
    except ValueError:  # unbalanced quotes
        return None
    if program in ("", "cat") or shutil.which(program) is None:
        return None
    return command


def run_pager(command: str, text: str, fallback: Any) -> None:
    """Pipe ``text`` into ``command`` (through the shell, as git does); print it to ``fallback`` when the
    pager cannot be started. Quitting the pager early is not an error."""
    import subprocess

    if not text:
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    try:
        proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, env=env, text=True)
    except OSError:
        fallback.write(text)
        return
    try:
        assert proc.stdin is not None
        proc.stdin.write(text)
        proc.stdin.close()
    except BrokenPipeError:
        pass
    proc.wait()


def wants_color(stream: Any) -> bool:
    """Whether to colour ``stream`` (rules in the module docstring)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


def _console(stream: Any) -> Console:
    from rich.console import Console

    color = wants_color(stream)
    return Console(
        file=stream, highlight=False, soft_wrap=True, emoji=False, force_terminal=color, no_color=not color
    )


def obj() -> AppContext:
    """The AppContext of the running command."""
    return click.get_current_context().find_object(AppContext)  # type: ignore[return-value]


def emit_json(value: Any, file: Any = None) -> None:
    """Write one JSON value on one line (the NDJSON record of a list, or a command's whole answer) to
    ``file`` (default: stdout)."""
    click.echo(jsontext.dumps(value, default=_json_default), file=file)


def emit_ndjson(values: Iterable[Any]) -> None:
    """Write each value as one line of JSON (NDJSON), streaming."""
    write = sys.stdout.write
    for value in values:
        write(jsontext.dumps(value, default=_json_default) + "\n")
    sys.stdout.flush()


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, bytes):
        return value.hex()
    if hasattr(value, "_asdict"):
        return value._asdict()
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def paged(command: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for a command callback whose output goes through the pager on a terminal."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with obj().paged():
            return command(*args, **kwargs)

    return wrapper


def _note_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    """``--json`` after the verb, or the global ``ckpt --json VERB`` (already noted in the AppContext)."""
    app = ctx.find_object(AppContext)
    if app is not None and value:
        app.json = True
    return value or (app is not None and app.json)


json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    callback=_note_json,
    help="Machine-readable output (schemas in docs/cli-json.md; lists are NDJSON).",
)
