"""What every `ckpt` verb shares: the store (opened once, lazily), consoles, JSON output, errors.

Colour (the rules rich and https://no-color.org use): NO_COLOR set and non-empty -> never; else
FORCE_COLOR set and non-empty -> always; else only when the stream is a terminal (and TERM is not "dumb").
Plain output is written as is (no wrapping) and rich is not even imported for it: `ckpt list` on 10,000
commits stays fast. Progress bars go to stderr and only show on a terminal.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
import orjson

if TYPE_CHECKING:
    from rich.console import Console

    from crewckpt.history.store import Store


class UsageProblem(click.UsageError):
    """A bad argument value found after parsing (bad branch name, bad JSON path...): exit status 2."""


class AppContext:
    """Per-invocation state, reachable from every command as ``click.get_current_context().obj``."""

    def __init__(self, store_path: str | None, debug: bool) -> None:
        self.store_path = store_path
        self.debug = debug
        self.json = False  # set by --json before the command runs, so errors come out as JSON too
        self._store: Store | None = None
        self._out: Console | None = None
        self._err: Console | None = None
        self.color = wants_color(sys.stdout)

    def store(self) -> Store:
        """The store named by --store / CKPT_STORE, or found by walking up from the working directory."""
        if self._store is None:
            from crewckpt.history.store import Store

            self._store = Store.open(self.store_path)
        return self._store

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
        if self._err is None:
            self._err = _console(sys.stderr)
        return self._err

    def line(self, text: str = "", style: str | None = None) -> None:
        """Print one line of human output, styled when stdout takes colour (never markup-parsed)."""
        if style is None or not self.color:
            sys.stdout.write(text + "\n")
        else:
            from rich.text import Text

            self.out.print(Text(text, style=style), soft_wrap=True)

    def styled(self, parts: Iterable[tuple[str, str | None]]) -> None:
        """Print one line assembled from (text, style) parts."""
        if not self.color:
            sys.stdout.write("".join(text for text, _ in parts) + "\n")
            return
        from rich.text import Text

        line = Text()
        for text, style in parts:
            line.append(text, style=style)
        self.out.print(line, soft_wrap=True)

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


def try_resolve(store: Store, rev: str) -> str | None:
    """``store.resolve(rev)``, or None when it names nothing (e.g. HEAD in an empty store)."""
    from crewckpt.errors import CkptError

    try:
        return store.resolve(rev)
    except CkptError:
        return None


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


def emit_json(value: Any) -> None:
    """Write one JSON value on one line (the NDJSON record of a list, or a command's whole answer)."""
    click.echo(orjson.dumps(value, default=_json_default).decode())


def emit_ndjson(values: Iterable[Any]) -> None:
    """Write each value as one line of JSON (NDJSON), streaming."""
    write = sys.stdout.write
    for value in values:
        write(orjson.dumps(value, default=_json_default).decode() + "\n")
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


def _note_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    app = ctx.find_object(AppContext)
    if app is not None and value:
        app.json = True
    return value


json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    callback=_note_json,
    help="Machine-readable output (schemas in docs/cli-json.md; lists are NDJSON).",
)
