"""CrewAI verbs: resume, import, export, and `list PATH` / `info PATH` on CrewAI's own checkpoints."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any

import click
import orjson

from crewckpt.cli.context import UsageProblem, emit_json, emit_ndjson, json_option, obj
from crewckpt.cli.fmt import entity_summary, safe_text, summary_fields_of
from crewckpt.errors import INSTALL_HINT, CkptError, CrewAIMissing
from crewckpt.errors import require_crewai as _require
from crewckpt.history import jsontext
from crewckpt.views.document import crewai_json


def require_crewai(verb: str) -> None:
    """Raise CrewAIMissing (one line with the install command) unless `crewai` can be imported."""
    _require(f"`ckpt {verb}`")


@click.command()
@click.argument("rev", required=False, default="HEAD")
@click.option(
    "--inputs",
    "inputs_text",
    metavar="JSON",
    help='Kickoff inputs as a JSON object, e.g. \'{"topic": "otters"}\'.',
)
@click.option(
    "--branch", "branch", metavar="NAME", help="Fork: write the resumed run's checkpoints on new branch NAME."
)
@click.option(
    "--flow-class",
    "flow_class",
    metavar="MODULE.CLASS",
    help="Flow checkpoints: restore into this Flow subclass (imports it; also the fix for a renamed class).",
)
@json_option
def resume(rev: str, inputs_text: str | None, branch: str | None, flow_class: str | None, as_json: bool) -> None:
    """Restore the crew, flow or agent that checkpoint REV records and run it to the end.

    Completed tasks (crews) and completed methods (flows) are skipped. A crew runs with the kickoff inputs
    the checkpoint records unless --inputs gives others. New checkpoints go on the branch REV names
    when REV is its tip (`ckpt resume fork/x`), else on the one branch whose tip REV is, else on a new
    branch BRANCH-from-ID (printed; the run's branch becomes the current branch); --branch NAME to
    choose. Needs the crewai extra (pip install 'crewckpt[crewai]'); the LLMs are rebuilt from their
    stored type.

    A checkpoint is data: the Flow class a flow checkpoint records is imported only with --flow-class,
    CREWAI_DESERIALIZE_CALLBACKS=1, or your yes at the prompt on a terminal.

    \b
    Examples:
      ckpt resume                         # the current branch's tip (HEAD)
      ckpt resume main~2 --inputs '{"topic": "sea otters"}' --branch sea-otters
      ckpt resume --flow-class myproject.flows.ResearchFlow
    """
    inputs = parse_inputs(inputs_text)
    if branch is not None:
        from crewckpt.history.refnames import check_branch

        check_branch(branch)  # BadRefName (exit 2) before CrewAI is even loaded
    require_crewai("resume")
    try:
        from crewckpt.crewai import restore
        from crewckpt.crewai.hooks import resuming
    except ImportError as exc:
        raise CrewAIMissing(
            f"`ckpt resume` cannot load crewckpt's CrewAI integration ({exc}); reinstall with: {INSTALL_HINT}"
        ) from None
    app = obj()
    store = app.store()
    full = store.resolve(rev)
    doc = crewai_json(store.read(full), full[:12])
    if inputs is None:
        inputs = recorded_crew_inputs(doc)
    from crewckpt.crewai.run import restore_class, run_restored, tty_confirm

    with _console_to_stderr(as_json) as stdout:
        try:
            cls = restore_class(doc, store.info(full).meta, flow_class=flow_class, confirm=tty_confirm())
        except (CkptError, ValueError) as exc:
            raise CkptError(f"cannot restore {rev} ({full[:12]}): {_restore_problem(exc)}") from None
        try:
            with resuming(rev, full):  # restores the id resolved above; the branch rule sees REV's name
                entity = restore(full, store=store, cls=cls, fork=branch or False)
        except ValueError as exc:
            raise CkptError(f"cannot restore {rev} ({full[:12]}): {_restore_problem(exc)}") from None
        run = _finished_crew(entity) or run_restored(entity, inputs)
    from crewckpt.history.head import follow_run

    finished = not run.checkpoint_id or run.checkpoint_id == full  # the run had nothing left to do
    branch_now = run.branch or store.info(full).branch
    # a finished run still makes REV's branch current, as the README says `ckpt resume` does
    switched = follow_run(store, branch_now, None if finished else run.checkpoint_id, full, finished=finished)
    output = getattr(run.result, "raw", run.result)
    record: dict[str, Any] = {
        "rev": rev,
        "id": full,
        "entity": type(entity).__name__,
        "output": output
        if isinstance(output, (str, int, float, bool, type(None), dict, list))
        else str(output),
        "head": run.checkpoint_id or full,
        "branch": branch_now,
    }
    if as_json:
        emit_json(record, file=stdout)
        return
    if finished:
        unused = (f"; --inputs not used: nothing ran (resume an earlier checkpoint, e.g. {rev}~1, to rerun "
                  f"with them)" if inputs_text is not None else "")
        click.echo(_nothing_left(entity, full, branch_now, switched=switched,
                                 current=store.current_branch() == branch_now) + unused)
    else:
        click.echo(f"Resumed {type(entity).__name__} from {full[:8]}; latest checkpoint now {record['head'][:8]} "
                   f"on branch {record['branch']}" + (" (now the current branch)" if switched else ""))
    if record["output"] is not None:
        click.echo(
            record["output"] if isinstance(record["output"], str) else jsontext.dumps(record["output"])
        )


def _finished_crew(entity: Any) -> Any:
    """For a restored crew whose every task is completed, the run without running it: kicking it off would
    skip every task yet, with ``on_events=["*"]``, write kickoff checkpoints of a run that did nothing.
    Returns a :class:`crewckpt.crewai.run.RunResult` (the last task's output, no checkpoint, the branch the
    restore chose), else None (run it)."""
    from crewai import Crew
    from crewai.events.event_bus import crewai_event_bus

    tasks = getattr(entity, "tasks", None) if isinstance(entity, Crew) else None
    if not tasks or any(getattr(t, "output", None) is None for t in tasks):
        return None
    from crewckpt.crewai.run import RunResult
    state = crewai_event_bus.runtime_state
    return RunResult(tasks[-1].output, None, getattr(state, "_branch", None) if state is not None else None)


def _nothing_left(entity: Any, full: str, branch: str, *, switched: bool, current: bool) -> str:
    """The line of a ``ckpt resume`` whose checkpoint records a finished run (it wrote nothing)."""
    what = (f"every task of {full[:8]} is completed" if type(entity).__name__ == "Crew"
            else f"{full[:8]} records a finished {type(entity).__name__.lower()}")
    where = (f"{branch} is now the current branch" if switched else f"{branch} is the current branch" if current
             else "no checkpoint was written")
    return f"nothing left to run: {what}; {where}"


@contextlib.contextmanager
def _console_to_stderr(active: bool) -> Iterator[Any]:
    """With --json, send what the run prints (CrewAI's panels, print() in tasks) to stderr so that stdout
    carries only the JSON answer; yields the real stdout to write it to. CrewAI's console handlers run on
    its event pool: they are waited for before stdout is given back."""
    real = sys.stdout
    if not active:
        yield real
        return
    sys.stdout = sys.stderr
    try:
        yield real
    finally:
        from crewai.events.event_bus import crewai_event_bus

        crewai_event_bus.flush()
        if sys.stdout is sys.stderr:
            sys.stdout = real


def recorded_crew_inputs(doc: Any) -> dict[str, Any] | None:
    """The kickoff inputs a crew checkpoint records (``checkpoint_inputs``), or None (no crew, or none
    recorded). Resuming with them re-interpolates the remaining tasks as the run (or a fork made with
    `ckpt fork --inputs`) recorded them; flows are not given them (inputs would overwrite their state)."""
    for entity in doc.get("entities") or [] if isinstance(doc, dict) else []:
        if isinstance(entity, dict) and entity.get("entity_type") == "crew":
            recorded = entity.get("checkpoint_inputs")
            return dict(recorded) if isinstance(recorded, dict) and recorded else None
    return None


def parse_inputs(text: str | None) -> dict[str, Any] | None:
    """The --inputs JSON object, or None; a UsageProblem (exit 2) for anything else."""
    if text is None:
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageProblem(
            f'--inputs is not valid JSON ({exc}); write an object like \'{{"topic": "otters"}}\''
        ) from None
    if not isinstance(value, dict):
        raise UsageProblem('--inputs must be a JSON object like \'{"topic": "otters"}\'')
    return value


_UNKNOWN_LLM = re.compile(r"Unknown llm_type: '([^']*)'")


def _restore_problem(exc: BaseException) -> str:
    """Why a checkpoint did not validate, in one line with the fix.

    An unknown ``llm_type`` (an LLM class not registered in this process) names the type(s) and how to
    register them; other pydantic errors give their count and the first one's location and message; any
    other exception is :func:`_one_line`.
    """
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return _one_line(exc)
    errors = exc.errors()
    llm_types = sorted({m.group(1) for e in errors if (m := _UNKNOWN_LLM.search(str(e.get("msg", ""))))})
    if llm_types:
        names = ", ".join(repr(t) for t in llm_types)
        return (f"unknown llm_type {names}: no LLM class is registered under that name in this process; "
                f"register it before restoring (crewai.agents.agent_builder.base_agent._LLM_TYPE_REGISTRY"
                f"[{llm_types[0]!r}] = 'your_module.YourLLM'; for ScriptedLLM import crewckpt.testing), "
                "or restore in code and set agent.llm")
    first: dict[str, Any] = dict(errors[0]) if errors else {}
    where = ".".join(str(part) for part in first.get("loc", ())) or "document"
    count = f"{len(errors)} validation error{'s' if len(errors) != 1 else ''}"
    return _one_line(f"{count} for {exc.title}; first: {where}: {first.get('msg', exc)}")


def _one_line(exc: BaseException | str, limit: int = 240) -> str:
    """An exception as one short line (pydantic's can run to thousands of characters); --debug shows all."""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "… (run with --debug for the whole error)"


# -- CrewAI locations (JSON folder, JSON file, SQLite db) ---------------------------------------------------


def list_crewai_path(path: str, branch: str | None, as_json: bool) -> None:
    """`ckpt list PATH`: CrewAI checkpoints at PATH, newest first, parsed one at a time."""
    from crewckpt.views.document import crewai_summary
    from crewckpt.views.reader import open_source

    app = obj()
    with open_source(path) as source:
        records = [r for r in source.records if branch is None or r.branch == branch]
        rows: list[tuple[Any, Any, str | None, str | None]] = []  # record, summary, trigger, error
        for record in reversed(_write_order(records, source.kind)):
            try:
                checkpoint = source.load(record)
            except CkptError as exc:
                rows.append((record, None, None, str(exc)))
                continue
            trigger = checkpoint.value.get("trigger")
            rows.append(
                (record, crewai_summary(checkpoint.value), trigger if isinstance(trigger, str) else None, None)
            )
        problems = list(source.problems)
        kind = source.kind
    if as_json:
        emit_ndjson(_crewai_record(r, s, err, kind, trigger) for r, s, trigger, err in rows)
    else:
        twidth = max((len(t or "manual") for _, _, t, _ in rows), default=0)
        for record, summary, trigger, error in rows:
            what = entity_summary(summary_fields_of(summary)) if summary else f"unreadable: {error}"
            app.styled(
                [
                    (_ts(record.created_at) + "  ", "dim"),
                    (record.checkpoint_id + "  ", "yellow"),
                    (record.branch + "  ", "cyan"),
                    ((trigger or "manual").ljust(twidth) + "  ", None),
                    (f"parent {record.parent_id or '-'}  ", "dim"),
                    (what, "red" if error else None),
                ]
            )
        if not rows:
            click.echo(
                f"no CrewAI checkpoints in {path}" + (f" on branch {branch}" if branch else ""), err=True
            )
    for problem in problems:
        click.echo(f"ckpt: warning: {safe_text(problem)}", err=True)


def info_crewai_path(path: str, as_json: bool) -> None:
    """`ckpt info PATH`: the location (kind, count, branches, bytes) and its newest checkpoint."""
    from crewckpt.views.document import crewai_summary
    from crewckpt.views.reader import open_source

    app = obj()
    with open_source(path) as source:
        records = _write_order(source.records, source.kind)
        latest = records[-1] if records else None
        checkpoint = source.load(latest) if latest else None
        kind = source.kind
        problems = list(source.problems)
    summary = crewai_summary(checkpoint.value) if checkpoint else None
    record = {
        "path": path,
        "kind": kind,
        "checkpoints": len(records),
        "branches": sorted({r.branch for r in records}),
        "stored_bytes": sum(r.size for r in records),
        "latest": _crewai_record(latest, summary, None, kind, _trigger(checkpoint)) if latest else None,
        "problems": [str(p) for p in problems],
    }
    if checkpoint is not None:
        record["latest"]["crewai_version"] = checkpoint.value.get("crewai_version")
        record["latest"]["inputs"] = _inputs(checkpoint.value)
    if as_json:
        emit_json(record)
        return
    from crewckpt.history.diff import human_bytes

    rows = [
        ("location", f"{path} ({kind})"),
        ("checkpoints", str(len(records))),
        ("branches", ", ".join(record["branches"]) or "-"),
        ("size", human_bytes(record["stored_bytes"])),
    ]
    if latest is not None and record["latest"] is not None:
        rows += [
            ("latest", latest.checkpoint_id),
            ("  parent", latest.parent_id or "(root)"),
            ("  branch", latest.branch),
            ("  created", _ts(latest.created_at) + " UTC"),
            ("  crewai", str(record["latest"].get("crewai_version") or "-")),
            ("  inputs", jsontext.dumps(record["latest"].get("inputs") or {})),
            ("  entities", entity_summary(summary_fields_of(summary)) if summary else "-"),
            ("  events", str(summary.event_count) if summary else "-"),
            ("  trigger", _trigger(checkpoint) or "manual"),
        ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        app.styled([(f"{key:<{width}}  ", "bold"), (value, None)])
    for problem in problems:
        click.echo(f"ckpt: warning: {safe_text(problem)}", err=True)


def _write_order(records: list[Any], kind: str) -> list[Any]:
    """Oldest first, as CrewAI orders them: by creation second, then file mtime (JSON) or rowid (SQLite,
    the listing order). Checkpoint ids are random within a second, so they cannot break ties."""
    import os

    def mtime(record: Any) -> int:
        try:
            return os.stat(record.source).st_mtime_ns if kind != "sqlite" else 0
        except OSError:
            return 0

    position = {id(r): i for i, r in enumerate(records)}
    return sorted(records, key=lambda r: (r.created_at, mtime(r), position[id(r)]))


def _crewai_record(
    record: Any, summary: Any, error: str | None, kind: str, trigger: str | None = None
) -> dict[str, Any]:
    return {
        "trigger": trigger,
        "checkpoint_id": record.checkpoint_id,
        "parent_id": record.parent_id,
        "branch": record.branch,
        "created_at": record.created_at,
        "source": record.source,
        "kind": kind,
        "size": record.size,
        "summary": _summary_dict(summary) if summary else None,
        "error": error,
    }


def _summary_dict(summary: Any) -> dict[str, Any]:
    return {
        "entities": [[t, n] for t, n in summary.entities],  # as in the commit record: [type, name]
        "tasks_done": summary.tasks_done,
        "tasks_total": summary.tasks_total,
        "event_count": summary.event_count,
        "logical_bytes": summary.logical_bytes,
    }


def _trigger(checkpoint: Any) -> str | None:
    value = checkpoint.value.get("trigger") if checkpoint is not None else None
    return value if isinstance(value, str) else None


def _inputs(doc: Any) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for entity in doc.get("entities") or []:
        if isinstance(entity, dict) and isinstance(entity.get("checkpoint_inputs"), dict):
            merged.update(entity["checkpoint_inputs"])
    return merged


def _ts(created_at: str) -> str:
    """``20261129T234223`` -> ``2026-11-29 23:42:23`` (UTC, as CrewAI names files)."""
    c = created_at
    if len(c) == 15 and c[8] == "T":
        return f"{c[0:4]}-{c[4:6]}-{c[6:8]} {c[9:11]}:{c[11:13]}:{c[13:15]}"
    return c


# -- import / export ----------------------------------------------------------------------------------------


def _check_branch_options(branch_prefix: str | None, branch: str | None) -> None:
    """Raise UsageProblem naming the option when ``--branch`` or ``--branch-prefix`` (with CrewAI's ``main``
    after it) is not a valid branch name."""
    from crewckpt.errors import BadRefName
    from crewckpt.history.refnames import check_branch

    for option, value, name in (("--branch", branch, branch), ("--branch-prefix", branch_prefix,
                                                                  f"{branch_prefix}main")):
        if value is None:
            continue
        try:
            check_branch(name)
        except BadRefName as e:
            raise UsageProblem(f"{option} {value!r} makes a bad branch name ({e})") from None


@click.command("import")
@click.argument("path", type=click.Path(exists=True))
@click.option(
    "--branch-prefix",
    "branch_prefix",
    metavar="P",
    help="Prepend P to every CrewAI branch (imported/ -> imported/main).",
)
@click.option(
    "--branch",
    "branch",
    metavar="B",
    help="Put every checkpoint on branch B (CrewAI's branch is kept in meta).",
)
@json_option
def import_(path: str, branch_prefix: str | None, branch: str | None, as_json: bool) -> None:
    """Import CrewAI checkpoints (a JSON folder, one JSON file or an SQLite db) into the store.

    Lineage (parent ids) and branches are kept; CrewAI ids become aliases (`ckpt show <crewai id>`).
    Importing the same source twice adds nothing. Unreadable checkpoints are skipped and reported. With no
    store yet, ./.ckpt (or --store PATH) is created.

    \b
    Examples:
      ckpt import ./.checkpoints
      ckpt import cp.db --branch-prefix imported/
    """
    from crewckpt.views import transfer

    _check_branch_options(branch_prefix, branch)  # before the store exists: a bad name creates nothing
    app = obj()
    store = app.store(create=True)
    with app.progress(f"import {path}") as update:
        report = transfer.import_checkpoints(
            store, path, branch_prefix=branch_prefix, branch=branch, progress=update
        )
    _print_transfer(app, report, as_json)
    if (branch_prefix or branch) and report.present and not as_json:  # else the prefix seems ignored
        option = "--branch" if branch else "--branch-prefix"
        click.echo(f"ckpt: note: {len(report.present)} checkpoint(s) were already in the store and stay on "
                   f"their branches ({option} places only new ones); name one with `ckpt branch NAME REV`",
                   err=True)
    if not report.imported and not report.present:
        why = "every checkpoint found was skipped" if report.problems else "no CrewAI checkpoint found there"
        raise CkptError(f"nothing imported from {path}: {why}; give a CrewAI checkpoint folder, JSON file or "
                        f"SQLite database")


@click.command()
@click.argument("revs", nargs=-1, metavar="[REV...]")
@click.option(
    "--to", "dest", required=True, type=click.Path(), metavar="PATH", help="Destination folder or database."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "sqlite"]),
    default=None,
    help="CrewAI layout (default: sqlite when PATH ends in .db/.sqlite, else a JSON folder).",
)
@click.option(
    "--branch", "branches", multiple=True, metavar="B", help="The live checkpoints of branch B (repeatable)."
)
@click.option(
    "--all", "all_", is_flag=True, help="Every live checkpoint (the default without REV or --branch)."
)
@click.option(
    "--strip-prefix", "strip_prefix", metavar="P", help="Remove P from branch names (undoes --branch-prefix)."
)
@json_option
def export(
    revs: tuple[str, ...],
    dest: str,
    fmt: str | None,
    branches: tuple[str, ...],
    all_: bool,
    strip_prefix: str | None,
    as_json: bool,
) -> None:
    """Write checkpoints in CrewAI's layout, readable by `crewai checkpoint` and from_checkpoint.

    Exactly the commits REV... name, else the live commits of each --branch, else all of them. Files
    already there with the same content are left as they are.

    \b
    Examples:
      ckpt export --branch main --to ./.checkpoints
      ckpt export main~2 main --format sqlite --to runs.db
    """
    from crewckpt.views import transfer

    if sum(bool(x) for x in (revs, branches, all_)) > 1:
        raise UsageProblem("choose one selection: REV..., --branch B or --all")
    if fmt is None:
        fmt = "sqlite" if dest.endswith((".db", ".sqlite", ".sqlite3")) else "json"
    app = obj()
    store = app.store()
    from crewckpt.history.refnames import check_branch

    branches = tuple(check_branch(b) for b in branches)  # BadRefName (exit 2) before anything is resolved
    for branch in branches:
        store.resolve(branch)  # unknown branch: a one-line error before anything is written
    _check_destination(dest, fmt)
    with app.progress(f"export {dest}") as update:
        report = transfer.export_checkpoints(
            store,
            dest,
            fmt=fmt,
            revs=list(revs) or None,
            branches=list(branches) or None,
            strip_prefix=strip_prefix,
            progress=update,
        )
    _print_transfer(app, report, as_json)


def _check_destination(dest: str, fmt: str) -> None:
    """One-line errors for destinations that cannot work, before anything is written."""
    from pathlib import Path

    p = Path(dest)
    for parent in (p, *p.parents):
        if parent.exists():
            if parent != p and not parent.is_dir():
                raise CkptError(f"--to {dest}: {parent} is a file, not a folder; choose a path in a folder")
            break
    if fmt == "json" and p.exists() and not p.is_dir():
        raise CkptError(f"--to {dest}: is a file; a JSON export needs a folder (or use --format sqlite)")
    if fmt == "sqlite" and p.is_dir():
        raise CkptError(f"--to {dest}: is a folder; an SQLite export needs a database file path")
    if fmt == "sqlite" and p.is_file():
        from crewckpt.backends.sqlite import is_store_db

        if is_store_db(p):  # CrewAI's table would land inside a crewckpt store's own database
            raise CkptError(f"--to {dest}: is a crewckpt store's database, not a CrewAI one; export to a file of "
                            f"its own (e.g. checkpoints.db)")


def _print_transfer(app: Any, report: Any, as_json: bool) -> None:
    """The report's to_json() record, or its one-line summary and one line per problem (on stderr)."""
    if as_json:
        emit_json(report.to_json())
        return
    click.echo(report.summary())
    for problem in report.problems:
        click.echo(f"ckpt: warning: {safe_text(problem)}", err=True)
