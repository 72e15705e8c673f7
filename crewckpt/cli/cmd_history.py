"""History verbs: init, log, list, info, rev-parse, show, diff."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

import click

from crewckpt.cli.context import (
    UsageProblem,
    emit_json,
    emit_ndjson,
    json_option,
    memory_problem,
    obj,
    paged,
    try_resolve,
)
from crewckpt.cli.fmt import commit_json, entity_summary, local_time, safe_text, short_ids, summary_fields
from crewckpt.errors import UnknownRevision
from crewckpt.history import jsontext
from crewckpt.views.document import crew_summary

_TAG_STYLE = {
    "header": "bold",
    "added": "green",
    "removed": "red",
    "changed": "yellow",
    "hunk": "cyan",
    "meta": "dim",
    "plain": None,
}


@click.command()
@click.argument("path", required=False, metavar="[PATH]")
@click.option("--shared", is_flag=True,
              help="Honour the umask (e.g. group-readable) instead of making the store private (0700/0600).")
@json_option
def init(path: str | None, shared: bool, as_json: bool) -> None:
    """Create an empty store at PATH (default: the global --store or $CKPT_STORE, else ./.ckpt).

    PATH is any store location: a folder (or sqlite:PATH), or the URL of an installed backend
    (postgresql://host/db with crewckpt[postgres]).

    The new folder and its files are private to you (0700/0600) unless --shared.

    \b
    Example:
      ckpt init                 # ./.ckpt
      ckpt init ~/runs/.ckpt    # then: export CKPT_STORE=~/runs/.ckpt
    """
    from crewckpt.errors import BadLocation, StoreExists
    from crewckpt.history.store import Store

    path = path or obj().store_path or ".ckpt"
    memory = memory_problem(path)
    if memory is not None:  # it would be gone when this command exits
        raise BadLocation(memory)
    try:
        store = Store.init(path, private=not shared)
    except StoreExists:
        raise StoreExists(
            f"{path}: a crewckpt store already exists here; use it (ckpt --store {path} ...) or choose another path"
        ) from None
    where = store.location or path
    store.close()
    if as_json:
        emit_json({"path": where})
    else:
        click.echo(f"Initialized empty crewckpt store in {where}")


@click.command()
@click.argument("rev", required=False, default="HEAD")
@click.option("--all", "all_", is_flag=True, help="Every branch, not only the history of REV.")
@click.option("--graph", is_flag=True, help="Draw the commit graph (forks and fork points) beside the log.")
@click.option("--oneline", is_flag=True, help="One line per commit: short id, refs, trigger, summary.")
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=0), help="Show at most N commits.")
@click.option("--branch", "branch", metavar="B", help="History of branch B (same as REV=B).")
@json_option
@paged
def log(
    rev: str, all_: bool, graph: bool, oneline: bool, limit: int | None, branch: str | None, as_json: bool
) -> None:
    """Show commit history, newest first (the history of REV, default HEAD).

    \b
    Examples:
      ckpt log -n 20
      ckpt log --graph --all --oneline
      ckpt log fork/a1b2c3d4 --json | jq .summary
    """
    app = obj()
    store = app.store()
    if branch:
        rev = branch
    head = try_resolve(store, "HEAD")  # the current branch's tip; None while it is unborn
    current = store.current_branch()
    commits = _log_commits(store, rev, all_, limit)
    if as_json:
        emit_ndjson(_log_record(c) for c in commits)
        return
    tips = _tips_by_id(store, commits)
    shorts = short_ids([c.id for c in commits] + [p for c in commits for p in getattr(c, "parents", [])])
    rows: Iterable[Any]
    cut: set[str] = set()  # with --all, commits whose parents were all pruned (their line ends here)
    if graph:
        from crewckpt.cli.graph import graph_rows

        shown = {c.id for c in commits}
        layout = []
        for c in commits:
            parents = list(getattr(c, "parents", []))
            if all_ and limit is None:  # every live commit is listed: a missing parent was pruned
                kept = [p for p in parents if p in shown]
                if parents and not kept:
                    cut.add(c.id)
                parents = kept
            layout.append((c.id, parents))
        rows = graph_rows(layout)
    else:
        rows = (None for _ in commits)
    for commit, row in zip(commits, rows):
        prefix = ""
        if row is not None:
            for line in row.before:
                app.line(line, "red")
            prefix = row.row + " "
        refs = tips.get(commit.id, [])
        if commit.id == head and current in refs:  # git's decoration: (HEAD -> main, other)
            refs = [f"HEAD -> {current}"] + [r for r in refs if r != current]
        _print_log_entry(app, commit, shorts, refs, prefix, oneline)
        if commit.id in cut:
            app.styled([(prefix.replace("*", "~"), "red"), ("(pruned: history continues no further)", "dim")])


def _log_commits(store: Any, rev: str, all_: bool, limit: int | None) -> list[Any]:
    """The commits `log` shows. Following parents, a pruned commit ends the history with one marker line,
    whether gc has collected it yet or not (a pruned commit is no longer a checkpoint `show` or `list`
    know by its short id), so `log` says the same before and after `ckpt gc`."""
    if all_:
        commits = sorted(store.list(), key=lambda c: c.seq, reverse=True)
        return commits[:limit] if limit is not None else commits
    from crewckpt.history.commits import PrunedCommit

    out: list[Any] = []
    for c in store.log(rev, limit=limit):
        if not c.live:
            out.append(PrunedCommit(c.id))
            break
        out.append(c)
    return out


def _log_record(commit: Any) -> dict[str, Any]:
    if _is_pruned(commit):
        return {"id": commit.id, "pruned": True}
    return commit_json(commit)


def _is_pruned(commit: Any) -> bool:
    return not hasattr(commit, "time_ns")


def _print_log_entry(
    app: Any, commit: Any, shorts: dict[str, str], refs: list[str], prefix: str, oneline: bool
) -> None:
    short = shorts.get(commit.id, commit.id[:8])
    if _is_pruned(commit):
        app.styled([(prefix, "red"), (short, "yellow"), (" (pruned: history continues no further)", "dim")])
        return
    decoration = f" ({', '.join(refs)})" if refs else ""
    summary = summary_fields(commit)
    if oneline:
        app.styled(
            [
                (prefix, "red"),
                (short, "yellow"),
                (decoration, "bold cyan"),
                (f" {commit.trigger or 'manual'}", None),
                (f"  {entity_summary(summary)}", "dim"),
            ]
        )
        return
    pad = " " * len(prefix) if prefix else ""
    cont = prefix.replace("*", "|" if commit.parents else " ") if prefix else ""  # a root ends its lane
    app.styled([(prefix, "red"), (f"commit {short}", "yellow"), (decoration, "bold cyan")])
    parents = " ".join(shorts.get(p, p[:8]) for p in commit.parents) or "(root)"
    rows = [
        ("Branch:", commit.branch or "-"),
        ("Date:", local_time(commit.time_ns)),
        ("Trigger:", commit.trigger or "manual"),
        ("Parents:", parents),
    ]
    if commit.run_id:
        rows.append(("Run:", str(commit.run_id)))
    for label, value in rows:
        app.styled([(cont or pad, "red"), (f"{label:<9}{value}", None)])
    app.styled([(cont or pad, "red")])
    detail = f"{entity_summary(summary)}, {summary['event_count']} events, {_kb(summary['logical_bytes'])}"
    app.styled([(cont or pad, "red"), (f"    {detail}", None)])
    app.styled([(cont or pad, "red")])


def _kb(n: int) -> str:
    from crewckpt.history.diff import human_bytes

    return human_bytes(n)


def _tips_by_id(store: Any, commits: list[Any] | None = None) -> dict[str, list[str]]:
    """commit id -> branch names whose tip it is. With ``commits`` (a log's), a run's last commit that no
    branch names also gets its run ref (``refs/runs/<run id>``), as git decorates every ref: an earlier run
    on a branch a later, fresh run moved on, and a failed run that a resumed one continued."""
    from crewckpt.history import remotes
    from crewckpt.history.refnames import RUNS

    tips: dict[str, list[str]] = {}
    for name, tip in sorted(store.branches().items()):
        tips.setdefault(tip, []).append(name)
    for name, tip in remotes.tracking_refs(store).items():  # git's decoration shows origin/main too
        tips.setdefault(tip, []).append(name)
    if commits is not None:
        named = set(tips)
        for run, tip in sorted(store.runs().items()):
            if tip not in named:
                tips.setdefault(tip, []).append(RUNS + run)
    return tips


@click.command("list")
@click.argument("path", required=False, type=click.Path(), metavar="[PATH]")
@click.option("--branch", "branch", metavar="B", help="Only the checkpoints of branch B.")
@json_option
@paged
def list_(path: str | None, branch: str | None, as_json: bool) -> None:
    """List every checkpoint, newest first: time, short id, branch, trigger, entities.

    PATH reads CrewAI's own checkpoints instead of the store: a JSON checkpoint folder, one JSON file,
    or a CrewAI SQLite database (JSONB rows are decoded without SQLite >= 3.45).

    \b
    Examples:
      ckpt list --branch main
      ckpt list ./.checkpoints          # CrewAI JsonProvider folder
      ckpt list cp.db --json            # CrewAI SqliteProvider database
    """
    app = obj()
    if path is not None and _is_store_folder(path):
        app.store_path = path  # `ckpt list .ckpt`: that store
    elif path is not None:
        from crewckpt.cli.cmd_crewai import list_crewai_path

        list_crewai_path(path, branch, as_json)
        return
    store = app.store()
    commits = store.list(branch)  # write order (seq): reversed, newest first
    if branch is not None and not commits and branch not in store.branches():
        raise UnknownRevision(
            f"no branch named {branch!r}; branches: {', '.join(store.branches()) or 'none yet'}"
        )
    commits.reverse()
    if as_json:
        emit_ndjson(commit_json(c) for c in commits)
        return
    if not commits:
        click.echo("no checkpoints yet" + (f" on branch {branch}" if branch else ""), err=True)
        return
    shorts = short_ids(c.id for c in commits)
    bwidth = min(24, max(len(c.branch or "-") for c in commits))
    twidth = min(26, max(len(c.trigger or "manual") for c in commits))
    styles = ("dim", "yellow", "cyan", None, None)
    # Many commits share a second, a branch, a trigger and a summary: format each distinct value once.
    seconds: dict[int, str] = {}
    branches: dict[str, str] = {}
    triggers: dict[str | None, str] = {}
    summaries: dict[object, str] = {}

    def row(c: Any) -> tuple[str, str, str, str, str]:
        second = c.time_ns // 1_000_000_000
        when = seconds.get(second) or seconds.setdefault(second, local_time(c.time_ns) + "  ")
        branch = branches.get(c.branch) or branches.setdefault(c.branch, f"{safe_text(c.branch or '-'):<{bwidth}}  ")
        trigger = triggers.get(c.trigger) or triggers.setdefault(
            c.trigger, f"{safe_text(c.trigger or 'manual'):<{twidth}}  "
        )
        s = crew_summary(c.summary)
        key = (s.entities, s.tasks_done, s.tasks_total)
        what = summaries.get(key) or summaries.setdefault(key, entity_summary(s))
        return when, shorts[c.id] + "  ", branch, trigger, what

    rows = (row(c) for c in commits)
    if not app.color:  # one write: 10,000 lines cost milliseconds, not a call each
        sys.stdout.write("".join("".join(row) + "\n" for row in rows))
        return
    for cells in rows:
        app.styled(zip(cells, styles))


@click.command()
@click.argument("rev", required=False, default="HEAD")
@json_option
def info(rev: str, as_json: bool) -> None:
    """Show one checkpoint's metadata: id, parents, branch, time, trigger, entities, sizes.

    REV may also be a CrewAI checkpoint file, folder or SQLite database (see `ckpt list --help`).

    \b
    Examples:
      ckpt info main~2
      ckpt info ./.checkpoints/main/20261129T234223_1e1c9b77_p-none.json
    """
    if _is_store_folder(rev):
        raise UsageProblem(f"{rev} is a crewckpt store, not a checkpoint: ckpt --store {rev} info [REV]")
    if _is_crewai_path(rev):
        from crewckpt.cli.cmd_crewai import info_crewai_path

        info_crewai_path(rev, as_json)
        return
    app = obj()
    store = app.store()
    commit = store.info(rev)
    branches_at = _tips_by_id(store).get(commit.id, [])
    record = commit_json(commit, branches_at=branches_at)
    if as_json:
        emit_json(record)
        return
    summary = summary_fields(commit)
    rows = [
        ("commit", commit.id),
        ("branch", commit.branch or "-"),
        ("tip of", ", ".join(branches_at) or "-"),
        ("parents", " ".join(commit.parents) or "(root)"),
        ("date", f"{local_time(commit.time_ns)}  ({record['time']})"),
        ("trigger", commit.trigger or "manual"),
        ("run", commit.run_id or "-"),
        ("alias", commit.alias or "-"),
        (
            "entities",
            _entities_text(summary["entities"]),
        ),
        # a document with no CrewAI entity (any JSON) has no tasks or events to count, not zero of them
        ("tasks", f"{summary['tasks_done']}/{summary['tasks_total']} completed" if summary["entities"] else "-"),
        ("events", str(summary["event_count"]) if summary["entities"] else "-"),
        ("size", f"{_kb(summary['logical_bytes'])} as JSON"),
    ]
    for key, value in (record["meta"] or {}).items():
        rows.append((f"meta.{key}", jsontext.dumps(value) if not isinstance(value, str) else value))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        app.styled([(f"{key:<{width}}  ", "bold"), (str(value), "yellow" if key == "commit" else None)])


def _entities_text(entities: list[dict[str, Any]]) -> str:
    """``crew:research, flow:Pipeline (+3 unnamed flows)``: CrewAI's agent-executor flows have no name."""
    named = [f"{e['type']}:{e['name']}" if e["name"] else e["type"] for e in entities if e["name"]]
    unnamed = [e for e in entities if not e["name"]]
    if unnamed and not named:
        named.append(unnamed.pop(0)["type"])
    text = ", ".join(named) or "-"
    if unnamed:
        kinds = {e["type"] for e in unnamed}
        kind = kinds.pop() if len(kinds) == 1 else "entit"
        text += f" (+{len(unnamed)} unnamed {kind}{'s' if kind != 'entit' else 'ies'})"
    return text


def _is_store_folder(path: str) -> bool:
    """A crewckpt store: a folder holding one, or a ``memory:``/URL location (a bad scheme raises its
    one-line error here rather than being read as a CrewAI path)."""
    from crewckpt.backends import registry

    return registry.has_store(path)


def _is_crewai_path(arg: str) -> bool:
    """True when ``arg`` names a CrewAI checkpoint on disk rather than a revision.

    A path that exists and is spelled like one (has a folder separator, starts with ".", or ends in
    .json/.db/.sqlite) is a path. A bare existing name (a folder "main") is a path only when it does not
    resolve as a revision in the store, so `ckpt info main` inside a checkpoint folder still means the branch.
    """
    if not os.path.exists(arg):
        db, sep, _ = arg.rpartition("#")  # CrewAI's `<db>#<checkpoint id>` location
        return bool(sep) and os.path.isfile(db)
    if arg.startswith(".") or os.sep in arg or arg.endswith((".json", ".db", ".sqlite", ".sqlite3")):
        return True
    from crewckpt.errors import CkptError

    try:
        obj().store().resolve(arg)
    except CkptError:
        return True
    return False


@click.command("rev-parse")
@click.argument("rev")
@json_option
def rev_parse(rev: str, as_json: bool) -> None:
    """Print the full commit id that REV names.

    REV: a full id, a unique prefix of 4+ hex digits, a branch, HEAD or @ (the current branch's tip),
    latest (the last checkpoint written on any local branch), X~N, X^, X^N, BRANCH@{N}, HEAD@{N}, @{N} (the
    current branch's reflog), @{-N} (the N-th branch checked out before), or a CrewAI checkpoint id
    (``20261129T234223_1e1c9b77``).

    \b
    Example:
      ckpt rev-parse main~2
    """
    full = obj().store().resolve(rev)
    if as_json:
        emit_json({"rev": rev, "id": full})
    else:
        click.echo(full)


@click.command()
@click.argument("rev", required=False, default="HEAD")
@click.option(
    "--path", "json_path", metavar="JSON-PATH", help="Only this part, e.g. entities[0].tasks[2].output.raw"
)
@click.option("--raw", is_flag=True, help="Exact compact JSON (no indentation; strings keep their quotes).")
@click.option("--stored", is_flag=True,
              help="The document as stored: task agents as references ({\"$ref\": ...}), the $crewckpt key kept.")
@json_option
@paged
def show(rev: str, json_path: str | None, raw: bool, stored: bool, as_json: bool) -> None:
    """Print the checkpoint document REV records, or one part of it (--path).

    By default the JSON is indented (coloured on a terminal) and a string picked with --path is printed
    as text. --raw prints the exact JSON text CrewAI writes for it (a checkpoint imported from CrewAI comes
    back byte for byte; no newline added unless on a terminal); --json prints compact JSON. The document is
    CrewAI's (a task's agent is the agent, and --path may go through it: tasks[2].agent.role); --stored shows
    it as stored instead, where a task's agent may be {"$ref": "#/entities/0/agents/1"}, the crew's agent it
    is byte-equal to (docs/write-path.md, "Agent references").

    \b
    Examples:
      ckpt show main --path entities[0].checkpoint_inputs
      ckpt show 3f2fbc84 --path 'entities[0].tasks[2].output.raw'
      ckpt show HEAD --raw > checkpoint.json
    """
    from crewckpt.history.jsonpath import get_path

    app = obj()
    if raw and stored:
        raise UsageProblem("--raw prints CrewAI's JSON and --stored the stored shape: give one of them")
    doc, full = _load_doc(rev, crewai=not stored)  # a revision, or a CrewAI JSON checkpoint file
    value = get_path(doc, json_path) if json_path else doc
    if as_json:
        click.echo(jsontext.dumps(value))
        return
    if raw:
        sys.stdout.write(_crewai_text(value, full) + ("\n" if sys.stdout.isatty() else ""))
        return
    if isinstance(value, str) and json_path:
        click.echo(safe_text(value, multiline=True))
        return
    text = jsontext.dumps(value, indent=True)
    if app.color and len(text) < 200_000:  # rich's highlighter is slow beyond that: plain is better
        from rich.syntax import Syntax

        app.out.print(Syntax(text, "json", background_color="default", word_wrap=False), soft_wrap=True)
    else:
        click.echo(text)


@click.command()
@click.argument("rev1")
@click.argument("rev2", required=False)
@click.option("--stat", is_flag=True, help="A one-screen summary instead of the full diff.")
@click.option(
    "--word-diff", "word_diff", is_flag=True, help="Mark changed words in task outputs: [-old-]{+new+}."
)
@click.option(
    "-U",
    "--unified",
    "context",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Lines of context around changed task output lines.",
)
@json_option
@paged
def diff(rev1: str, rev2: str | None, stat: bool, word_diff: bool, context: int, as_json: bool) -> None:
    """Semantic diff of two checkpoints (REV2 omitted: REV1's parent against REV1).

    Kickoff inputs; tasks matched by task id with status and a unified diff of their outputs; agents'
    memory; flow state and completed methods; events added or removed by type; sizes; then every other
    changed JSON path. A REV may also be a CrewAI JSON checkpoint file.

    \b
    Examples:
      ckpt diff main fork/a1b2c3d4
      ckpt diff main~3 main --stat
      ckpt diff HEAD --json | jq '.entities[0].tasks[] | select(.op != "unchanged")'
    """
    from crewckpt.views.diff import diff_documents
    from crewckpt.views.diff_render import render_full, render_stat

    app = obj()
    if rev2 is None:
        _require_parent(rev1)
        old_rev, new_rev = f"{rev1}^", rev1
    else:
        old_rev, new_rev = rev1, rev2
    old_doc, old_id = _load_doc(old_rev, crewai=True)
    new_doc, new_id = _load_doc(new_rev, crewai=True)
    result = diff_documents(old_doc, new_doc, context_lines=context)
    if as_json:
        emit_json({"old": {"rev": old_rev, "id": old_id}, "new": {"rev": new_rev, "id": new_id}, **result})
        return
    app.line(f"diff {_label(old_rev, old_id)} {_label(new_rev, new_id)}", "bold")
    lines = render_stat(result) if stat else render_full(result, word_diff=word_diff)
    for tag, text in lines:
        app.line(text, _TAG_STYLE.get(tag))


def _crewai_text(value: Any, commit_id: str | None) -> str:
    """``value`` as CrewAI renders checkpoint JSON: ``json.dumps`` style, or pydantic's compact style when
    the commit was imported from a file in that style (crewckpt.views.layout, the exporter's rule)."""
    from crewckpt.views import layout

    style = None
    if commit_id is not None:
        crewai = obj().store().info(commit_id).meta.get("crewai")
        style = crewai.get("json_style") if isinstance(crewai, dict) else None
    return layout.render_json(value, style)


def _require_parent(rev: str) -> None:
    """`ckpt diff REV` compares REV with its parent: say so plainly when REV is a root."""
    if _is_crewai_path(rev):
        raise UsageProblem(
            f"{rev} is a CrewAI checkpoint, not a revision: name both sides (ckpt diff OLD NEW)"
        )
    store = obj().store()
    if not store.info(rev).parents:
        raise UnknownRevision(
            f"{rev} is a root checkpoint (no parent to compare with); name two: ckpt diff REV1 {rev}"
        )


def _load_doc(rev: str, *, crewai: bool = False) -> tuple[Any, str | None]:
    """(document, full commit id) for a revision, or (document, None) for one CrewAI checkpoint on disk:
    a JSON file, ``<db>#<checkpoint id>``, or a folder/database that holds exactly one. ``crewai``: a stored
    document as CrewAI's JSON (agent references expanded, crewckpt.views.document.crewai_json), else as
    stored."""
    if _is_crewai_path(rev):
        from crewckpt.views.reader import open_source

        with open_source(rev) as source:
            if len(source.records) != 1:
                raise UsageProblem(
                    f"{rev} holds {len(source.records)} checkpoints; name one: a .json file or <db>#<checkpoint id>"
                    " (see `ckpt list " + rev + "`)"
                )
            return source.load(source.records[0]).value, None
    store = obj().store()
    full = store.resolve(rev)
    doc = store.read(full)
    if crewai:
        from crewckpt.views.document import crewai_json

        doc = crewai_json(doc, full[:12])
    return doc, full


def _label(rev: str, full: str | None) -> str:
    """How the diff header names a side: ``main (6a33c953fc65)``, a short id alone, or a file path."""
    if full is None:
        return rev
    if full.startswith(rev):
        return full[:12]
    return f"{rev} ({full[:12]})"
