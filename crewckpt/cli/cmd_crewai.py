"""CrewAI verbs: resume, import, export, and `list PATH` / `info PATH` on CrewAI's own checkpoints."""

from __future__ import annotations

import importlib.util
from typing import Any

import click
import orjson

from crewckpt.cli.context import UsageProblem, emit_json, emit_ndjson, json_option, obj
from crewckpt.cli.fmt import entity_summary
from crewckpt.errors import CkptError

INSTALL_HINT = "pip install 'crewckpt[crewai]'"


class CrewAIMissing(CkptError):
    """A verb needs the crewai package (the `crewai` extra) and it is not installed."""


def require_crewai(verb: str) -> None:
    """Raise CrewAIMissing (one line with the install command) unless `crewai` can be imported."""
    try:
        spec = importlib.util.find_spec("crewai")
    except (ImportError, ValueError):  # ValueError: sys.modules["crewai"] is None (import blocked)
        spec = None
    if spec is None:
        raise CrewAIMissing(
            f"`ckpt {verb}` needs CrewAI, which is not installed; install it with: {INSTALL_HINT}"
        )


@click.command()
@click.argument("rev", required=False, default="HEAD")
@click.option(
    "--inputs",
    "inputs_text",
    metavar="JSON",
    help='Kickoff inputs as a JSON object, e.g. \'{"topic": "otters"}\'.',
)
@json_option
def resume(rev: str, inputs_text: str | None, as_json: bool) -> None:
    """Restore the crew, flow or agent that checkpoint REV records and run it to the end.

    Completed tasks (crews) and completed methods (flows) are skipped; new checkpoints continue REV's
    branch with REV as parent. Needs the crewai extra (pip install 'crewckpt[crewai]').

    \b
    Examples:
      ckpt resume                         # the latest checkpoint
      ckpt resume main~2 --inputs '{"topic": "sea otters"}'
    """
    inputs = _parse_inputs(inputs_text)
    require_crewai("resume")
    try:
        from crewckpt.crewai import restore
    except ImportError as exc:
        raise CrewAIMissing(
            f"`ckpt resume` cannot load crewckpt's CrewAI integration ({exc}); reinstall with: {INSTALL_HINT}"
        ) from None
    app = obj()
    store = app.store()
    full = store.resolve(rev)
    entity = restore(full, store=store)
    result = _kickoff(entity, inputs)
    output = getattr(result, "raw", result)
    record = {
        "rev": rev,
        "id": full,
        "entity": type(entity).__name__,
        "output": output
        if isinstance(output, (str, int, float, bool, type(None), dict, list))
        else str(output),
        "head": store.resolve("HEAD"),
    }
    if as_json:
        emit_json(record)
        return
    click.echo(f"Resumed {type(entity).__name__} from {full[:8]}; latest checkpoint now {record['head'][:8]}")
    if record["output"] is not None:
        click.echo(
            record["output"] if isinstance(record["output"], str) else orjson.dumps(record["output"]).decode()
        )


def _parse_inputs(text: str | None) -> dict[str, Any] | None:
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


def _kickoff(entity: Any, inputs: dict[str, Any] | None) -> Any:
    """Run a restored Crew/Flow (kickoff(inputs=...)) or Agent (kickoff() continues its messages)."""
    kickoff = getattr(entity, "kickoff", None)
    if kickoff is None:
        raise CkptError(f"restored object {type(entity).__name__} cannot be run: it has no kickoff()")
    kind = type(entity).__name__
    if inputs is not None and kind not in ("Agent", "LiteAgent"):
        return kickoff(inputs=inputs)
    return kickoff()


# -- CrewAI locations (JSON folder, JSON file, SQLite db) ---------------------------------------------------


def list_crewai_path(path: str, branch: str | None, as_json: bool) -> None:
    """`ckpt list PATH`: CrewAI checkpoints at PATH, newest first, parsed one at a time."""
    from crewckpt.history.summary import summarize
    from crewckpt.views.reader import open_source

    app = obj()
    with open_source(path) as source:
        records = [r for r in source.records if branch is None or r.branch == branch]
        rows = []
        for record in sorted(records, key=lambda r: (r.created_at, r.checkpoint_id), reverse=True):
            try:
                checkpoint = source.load(record)
            except CkptError as exc:
                rows.append((record, None, str(exc)))
                continue
            rows.append((record, summarize(checkpoint.value), None))
        problems = list(source.problems)
        kind = source.kind
    if as_json:
        emit_ndjson(_crewai_record(r, s, err, kind) for r, s, err in rows)
    else:
        for record, summary, error in rows:
            what = entity_summary(_summary_dict(summary)) if summary else f"unreadable: {error}"
            app.styled(
                [
                    (_ts(record.created_at) + "  ", "dim"),
                    (record.checkpoint_id + "  ", "yellow"),
                    (record.branch + "  ", "cyan"),
                    (f"parent {record.parent_id or '-'}  ", "dim"),
                    (what, "red" if error else None),
                ]
            )
        if not rows:
            click.echo(
                f"no CrewAI checkpoints in {path}" + (f" on branch {branch}" if branch else ""), err=True
            )
    for problem in problems:
        click.echo(f"ckpt: warning: {problem}", err=True)


def info_crewai_path(path: str, as_json: bool) -> None:
    """`ckpt info PATH`: the location (kind, count, branches, bytes) and its newest checkpoint."""
    from crewckpt.history.summary import summarize
    from crewckpt.views.reader import open_source

    app = obj()
    with open_source(path) as source:
        records = sorted(source.records, key=lambda r: (r.created_at, r.checkpoint_id))
        latest = records[-1] if records else None
        checkpoint = source.load(latest) if latest else None
        kind = source.kind
        problems = list(source.problems)
    summary = summarize(checkpoint.value) if checkpoint else None
    record = {
        "path": path,
        "kind": kind,
        "checkpoints": len(records),
        "branches": sorted({r.branch for r in records}),
        "stored_bytes": sum(r.size for r in records),
        "latest": _crewai_record(latest, summary, None, kind) if latest else None,
        "problems": [str(p) for p in problems],
    }
    if checkpoint is not None:
        record["latest"]["crewai_version"] = checkpoint.value.get("crewai_version")
        record["latest"]["inputs"] = _inputs(checkpoint.value)
    if as_json:
        emit_json(record)
        return
    from crewckpt.history.diff_render import human_bytes

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
            ("  inputs", orjson.dumps(record["latest"].get("inputs") or {}).decode()),
            ("  entities", entity_summary(_summary_dict(summary)) if summary else "-"),
            ("  events", str(summary.event_count) if summary else "-"),
            ("  trigger", str(checkpoint.value.get("trigger") or "manual") if checkpoint else "-"),
        ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        app.styled([(f"{key:<{width}}  ", "bold"), (value, None)])
    for problem in problems:
        click.echo(f"ckpt: warning: {problem}", err=True)


def _crewai_record(record: Any, summary: Any, error: str | None, kind: str) -> dict[str, Any]:
    return {
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
        "entities": [{"type": t, "name": n} for t, n in summary.entities],
        "tasks_done": summary.tasks_done,
        "tasks_total": summary.tasks_total,
        "event_count": summary.event_count,
        "logical_bytes": summary.logical_bytes,
    }


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


@click.command("import")
@click.argument("path", type=click.Path(exists=True))
@click.option("--branch", "branch", metavar="B", help="Put every imported checkpoint on branch B.")
@json_option
def import_(path: str, branch: str | None, as_json: bool) -> None:
    """Import CrewAI checkpoints (JSON folder, JSON file or SQLite db) into the store, keeping lineage.

    \b
    Examples:
      ckpt import ./.checkpoints
      ckpt import cp.db --branch imported
    """
    from crewckpt.views import transfer

    app = obj()
    store = app.store()
    with app.progress(f"import {path}") as update:
        report = transfer.import_checkpoints(store, path, branch=branch, progress=update)
    _print_transfer(app, "imported", report, as_json)


@click.command()
@click.argument("dest", type=click.Path())
@click.option(
    "--branch", "branches", multiple=True, metavar="B", help="Only branch B (repeatable; default all)."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "sqlite"]),
    default=None,
    help="CrewAI layout to write (default: sqlite for a .db/.sqlite DEST, else a JSON folder).",
)
@json_option
def export(dest: str, branches: tuple[str, ...], fmt: str | None, as_json: bool) -> None:
    """Write the store's checkpoints in CrewAI's layout, readable by `crewai checkpoint` and from_checkpoint.

    \b
    Examples:
      ckpt export ./.checkpoints --branch main
      ckpt export runs.db
    """
    from crewckpt.views import transfer

    if fmt is None:
        fmt = "sqlite" if dest.endswith((".db", ".sqlite", ".sqlite3")) else "json"
    app = obj()
    store = app.store()
    with app.progress(f"export {dest}") as update:
        report = transfer.export_checkpoints(
            store, dest, fmt=fmt, branches=list(branches) or None, progress=update
        )
    _print_transfer(app, "exported", report, as_json)


def _print_transfer(app: Any, verb: str, report: Any, as_json: bool) -> None:
    from crewckpt.cli.cmd_maint import _print_report, _report_dict

    record = _report_dict(report)
    if as_json:
        emit_json(record)
        return
    _print_report(app, verb, record)
