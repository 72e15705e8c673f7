"""Branch verbs: branch (list, create, delete, rename), switch / checkout, fork and reflog."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from crewckpt.cli.context import UsageProblem, emit_json, emit_ndjson, json_option, obj, paged, try_resolve
from crewckpt.cli.fmt import entity_summary, local_time, safe_text, short_ids, summary_fields
from crewckpt.errors import BadRefName, CkptError
from crewckpt.history import refnames
from crewckpt.views.document import crewai_json

if TYPE_CHECKING:
    from crewckpt.history.store import Store


@click.command()
@click.argument("name", required=False)
@click.argument("rev", required=False)
@click.option(
    "-d", "--delete", "delete", metavar="NAME",
    help="Delete branch NAME if another branch or remote-tracking ref reaches its tip (its commits stay until "
         "pruned).",
)
@click.option("-D", "force_delete", metavar="NAME", help="Delete branch NAME even if nothing else reaches its tip "
                                                         "(= -d NAME --force).")
@click.option("-f", "--force", "force", is_flag=True, help="With -d: delete even if nothing else reaches the tip.")
@click.option("-m", "--move", "move", nargs=2, metavar="OLD NEW", help="Rename branch OLD to NEW.")
@click.option("-r", "--remotes", "remotes", is_flag=True, help="List the remote-tracking branches (origin/main).")
@click.option("-a", "--all", "all_refs", is_flag=True,
              help="List local and remote-tracking branches (remotes/origin/main), as git branch -a.")
@json_option
def branch(
    name: str | None, rev: str | None, delete: str | None, force_delete: str | None, force: bool,
    move: tuple[str, str] | None, remotes: bool, all_refs: bool, as_json: bool
) -> None:
    """List branches, or create branch NAME at REV (default HEAD).

    In the list, `*` marks the current branch: the one HEAD names (`ckpt switch` sets it), which
    `ckpt resume` without REV continues. The current branch cannot be deleted; renaming it moves HEAD along.

    \b
    Examples:
      ckpt branch                        # list, with each tip
      ckpt branch -a                     # also the remote-tracking ones (remotes/origin/main)
      ckpt branch try-gpt main~2         # new branch at main~2
      ckpt branch -m try-gpt experiment  # rename
      ckpt branch -d experiment          # delete the ref (refused if only it reaches its checkpoints)
      ckpt branch -D experiment          # delete it anyway
    """
    app = obj()
    if sum(x is not None for x in (name, delete, force_delete, move)) > 1:
        raise UsageProblem("use one of: ckpt branch NAME [REV], ckpt branch -d NAME, ckpt branch -D NAME, "
                           "ckpt branch -m OLD NEW")
    if (remotes or all_refs) and any(x is not None for x in (name, delete, force_delete, move)):
        raise UsageProblem("-r and -a list branches; use them alone (ckpt branch -a)")
    if force and delete is None:
        raise UsageProblem("--force goes with -d NAME (ckpt branch -d NAME --force, or ckpt branch -D NAME)")
    if force_delete is not None:
        delete, force = force_delete, True
    store = app.store()
    if delete is not None:
        branches = store.branches()
        if delete not in branches:  # a bad name a foreign store holds (fsck names it) is deleted as it is
            delete = refnames.check_branch(delete)  # as stored (NFC): 'café' typed decomposed names the same branch
        tip = branches.get(delete)  # as stored: a damaged ref (naming no commit) can be deleted too
        store.delete_branch(delete, force=force)
        if as_json:
            emit_json({"deleted": delete, "tip": tip})
            return
        click.echo(f"Deleted branch {safe_text(delete)} (was {tip[:8] if tip else '?'})")
        try:
            left = len(store.list(delete))
        except BadRefName:  # a damaged name a foreign store held: nothing is listed under it
            left = 0
        if left:  # as git's unreachable commits: listed and live until pruned, then gc frees them
            click.echo(f"its {left} checkpoint(s) stay listed until `ckpt prune --branch {safe_text(delete)}`; "
                       f"`ckpt gc` then frees their space", err=True)
        return
    if move is not None:
        old, new = move
        store.rename_branch(old, new)
        if as_json:
            emit_json({"renamed": old, "to": new, "tip": store.branches()[new]})
        else:
            click.echo(f"Renamed branch {old} to {new}")
        return
    if name is not None:
        target = store.resolve(rev or "HEAD")
        store.create_branch(name, target)
        if as_json:
            emit_json({"created": name, "tip": target})
        else:
            click.echo(f"Created branch {name} at {target[:8]}")
        return
    _list_branches(store, as_json, local=not remotes, tracking=remotes or all_refs)


def current_branch(store: Store) -> str | None:
    """The current branch (the one HEAD names) when it exists; None while it is unborn (no checkpoint yet)."""
    name = store.current_branch()
    return name if name in store.branches() else None


def _list_branches(store: Store, as_json: bool, *, local: bool = True, tracking: bool = False) -> None:
    """Every branch with its tip; ``*`` marks :func:`current_branch` (at most one). ``tracking``: also the
    remote-tracking branches, as ``remotes/<remote>/<branch>`` beside local ones (git branch -a), as
    ``<remote>/<branch>`` alone (git branch -r)."""
    app = obj()
    rows = {n: (refnames.HEADS + n, t) for n, t in store.branches().items()} if local else {}  # name -> ref, tip
    if tracking:
        for ref, target in store.backend.refs(refnames.REMOTES).items():
            rows[("remotes/" if local else "") + ref[len(refnames.REMOTES):]] = (ref, target.hex())
    refs = {n: ref for n, (ref, _) in rows.items()}
    branches = {n: tip for n, (_, tip) in rows.items()}
    current = current_branch(store)
    infos: dict[str, Any] = {}
    damaged: dict[str, str] = {}  # a ref naming no commit (hand-edited store): listed as such, with its fix
    for name in branches:
        try:
            infos[name] = store.info(refs[name])
        except CkptError as e:
            damaged[name] = str(e)
    if as_json:
        emit_ndjson(
            {
                "branch": name,
                "tip": tip,
                **({"damaged": damaged[name]} if name in damaged else {
                    "time_ns": infos[name].time_ns, "summary": infos[name].to_json()["summary"]}),
                "head": name == current and not refs[name].startswith(refnames.REMOTES),
                "remote": refs[name].startswith(refnames.REMOTES),
            }
            for name, tip in sorted(branches.items())
        )
        _damaged_exit(damaged)
        return
    if not branches:
        click.echo("no remote-tracking branches: `ckpt fetch` makes them" if not local else
                   "no branches yet: commit a checkpoint first", err=True)
        return
    shorts = short_ids(branches.values())
    width = max(len(n) for n in branches)
    for name, tip in sorted(branches.items()):
        mark = "*" if name == current and not refs[name].startswith(refnames.REMOTES) else " "
        app.styled(
            [
                (f"{mark} ", "green"),
                (safe_text(name).ljust(width) + "  ", "green" if mark == "*" else "cyan"),
                (shorts[tip] + "  ", "yellow"),
                *([("damaged: it names no commit", "red")] if name in damaged else [
                    (local_time(infos[name].time_ns) + "  ", "dim"),
                    (entity_summary(summary_fields(infos[name])), None),
                ]),
            ]
        )
    _damaged_exit(damaged)


def _damaged_exit(damaged: dict[str, str]) -> None:
    """After the listing: one stderr line per damaged branch (the ref's problem and fix), exit status 1."""
    for why in damaged.values():
        click.echo(f"ckpt: error: {why}", err=True)
    if damaged:
        click.get_current_context().exit(1)


@click.command()
@click.argument("rev")
@click.argument("new_name", metavar="[NAME]", required=False)
@click.option("--branch", "name", metavar="NAME", help="Name of the new branch (default fork/<short id>).")
@click.option(
    "--inputs", "inputs_text", metavar="JSON", help="Record these kickoff inputs in the fork (crewai)."
)
@click.option(
    "--set-output",
    "set_output",
    multiple=True,
    metavar="TASK=TEXT",
    help="Replace a completed task's output (TASK: name, number from 1, or id prefix); later tasks rerun.",
)
@click.option(
    "--set-output-file",
    "set_output_file",
    multiple=True,
    metavar="TASK=PATH",
    help="Like --set-output, with the text read from file PATH (UTF-8).",
)
@json_option
def fork(
    rev: str,
    new_name: str | None,
    name: str | None,
    inputs_text: str | None,
    set_output: tuple[str, ...],
    set_output_file: tuple[str, ...],
    as_json: bool,
) -> None:
    """Start a new branch at checkpoint REV, to resume from there with other inputs or edited outputs.

    The branch is NAME (`ckpt fork main~3 try2`, as `git branch NAME REV` names it), or --branch NAME, else
    fork/<short id>.

    Without edits the branch is a ref only (nothing is copied, no CrewAI needed). With --inputs or
    --set-output (crewai extra) the edited state is written as the branch's first checkpoint (trigger
    "fork"): tasks after the first edited one are cleared so that `ckpt resume NAME` runs them again with
    the edited output as context (the rule of CrewAI's own checkpoint TUI).

    \b
    Examples:
      ckpt fork main~3 --branch try-sea-otters
      ckpt resume try-sea-otters --inputs '{"topic": "sea otters"}'
      ckpt fork main --branch shorter --set-output task2='A two-line summary.'
      ckpt resume shorter                  # reruns task3 onwards
    """
    from crewckpt.cli.cmd_crewai import parse_inputs

    if new_name is not None and name is not None and new_name != name:
        raise UsageProblem(f"two names for the new branch ({new_name} and --branch {name}): give one")
    name = name or new_name
    inputs = parse_inputs(inputs_text)
    edits = [_split_edit(e, "--set-output") for e in set_output]
    edits += [
        (task, _read_text(path))
        for task, path in (_split_edit(e, "--set-output-file") for e in set_output_file)
    ]
    store = obj().store()
    target = store.resolve(rev)
    if name is None:
        existing = store.branches()
        name = f"fork/{target[:8]}"
        n = 2
        while name in existing:
            name = f"fork/{target[:8]}-{n}"
            n += 1
    if inputs is None and not edits:
        store.create_branch(name, target)
        if as_json:
            emit_json({"branch": name, "tip": target, "rev": rev})
        else:
            click.echo(f"Forked {rev} ({target[:8]}) as branch {name}")
            click.echo(f"Resume it with: {obj().command('resume', name, '[--inputs JSON]')}")
        return
    _fork_with_edits(store, rev, target, name, inputs, edits, as_json)


def _split_edit(text: str, option: str) -> tuple[str, str]:
    task, sep, value = text.partition("=")
    if not sep or not task.strip():
        raise UsageProblem(f"{option} takes TASK=VALUE (e.g. task2=new text), got {text!r}")
    return task.strip(), value


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise UsageProblem(f"--set-output-file: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageProblem(f"--set-output-file: {path} is not UTF-8 text") from None


def task_key(doc: object, task: str) -> tuple[int, int]:
    """(entity index, task index) of TASK in a checkpoint document: a task name, a number counted from 1
    over the crew's tasks, or a prefix (4+ characters) of a task id. Raises UsageProblem naming the tasks."""
    crews = [
        (i, e["tasks"])
        for i, e in enumerate(doc.get("entities") or [] if isinstance(doc, dict) else [])
        if isinstance(e, dict) and isinstance(e.get("tasks"), list) and e["tasks"]
    ]
    for entity, tasks in crews:
        for index, t in enumerate(tasks):
            if not isinstance(t, dict):
                continue
            if t.get("name") == task or (len(task) >= 4 and str(t.get("id") or "").startswith(task)):
                return entity, index
    if task.isdigit() and crews and 1 <= int(task) <= len(crews[0][1]):
        return crews[0][0], int(task) - 1
    names = [str(t.get("name") or t.get("id")) for _, tasks in crews for t in tasks if isinstance(t, dict)]
    raise UsageProblem(f"no task {task!r} in this checkpoint; tasks: {', '.join(names) or 'none'}")


def _fork_with_edits(
    store: Store,
    rev: str,
    target: str,
    name: str,
    inputs: dict[str, object] | None,
    edits: list[tuple[str, str]],
    as_json: bool,
) -> None:
    """Restore REV on branch NAME with edited inputs/outputs and record it (crewckpt.crewai.edits)."""
    from crewckpt.cli.cmd_crewai import CrewAIMissing, require_crewai
    from crewckpt.errors import CkptError
    from crewckpt.history import refnames

    refnames.check_branch(name)  # bad name: usage error before CrewAI is loaded
    doc = crewai_json(store.read(target), target[:12])
    outputs = {task_key(doc, task): text for task, text in edits}
    require_crewai("fork --inputs/--set-output")
    try:
        from crewckpt.crewai.edits import fork_with_edits
    except ImportError as exc:
        raise CrewAIMissing(f"`ckpt fork` cannot load crewckpt's CrewAI integration ({exc})") from None
    try:
        result = fork_with_edits(target, store=store, branch=name, inputs=inputs, task_outputs=outputs)
    except ValueError as exc:
        raise CkptError(f"cannot fork {rev}: {' '.join(str(exc).split())}") from None
    rerun = [_task_label(doc, key) for key in result.rerun]
    edited = [_task_label(doc, key) for key in outputs]
    if as_json:
        emit_json(
            {
                "branch": result.branch,
                "tip": result.fork_commit,
                "rev": rev,
                "forked_from": target,
                "edited": edited,
                "rerun": rerun,
                "inputs": inputs,
            }
        )
        return
    click.echo(
        f"Forked {rev} ({target[:8]}) as branch {result.branch}"
        + (f"; edited state recorded as {result.fork_commit[:8]}" if result.fork_commit else "")
    )
    if edited:
        click.echo(f"Edited: {', '.join(edited)}; will run again: {', '.join(rerun) or 'nothing'}")
    click.echo(f"Resume it with: {obj().command('resume', result.branch)}")


def _task_label(doc: object, key: tuple[int, int]) -> str:
    entity, index = key
    try:
        task = doc["entities"][entity]["tasks"][index]  # type: ignore[index]
        return str(task.get("name") or f"task {index + 1}")
    except (KeyError, IndexError, TypeError, AttributeError):
        return f"task {index + 1}"


@click.command()
@click.argument("branch", required=False, metavar="[BRANCH|HEAD]")
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=0), help="Show at most N entries.")
@json_option
@paged
def reflog(branch: str | None, limit: int | None, as_json: bool) -> None:
    """Where HEAD or branch BRANCH has pointed, newest first: the positions `HEAD@{N}` / `BRANCH@{N}` name.

    Without an argument: HEAD, as in git. HEAD's reflog has an entry for each commit on the current branch
    and each switch of the current branch (`ckpt switch`, `ckpt resume`, renaming it); a branch's reflog one
    for each commit, fork, reset or rename that moved it. Deleting a branch deletes its reflog.
    `@{N}` is the current branch's `BRANCH@{N}`. An entry whose checkpoint was pruned and collected by
    `ckpt gc` is marked so (`"collected": true` with --json): it no longer names anything readable.

    \b
    Examples:
      ckpt reflog                  # HEAD: commits and switches
      ckpt reflog main -n 5
      ckpt show main@{2} --path entities[0].checkpoint_inputs
    """
    from crewckpt.history.head import HEAD

    app = obj()
    store = app.store()
    if branch in (None, "@"):
        branch = HEAD
    if branch != HEAD and branch not in store.branches():
        from crewckpt.errors import UnknownRevision

        names = ", ".join(store.branches()) or "none yet"
        raise UnknownRevision(f"no branch named {branch!r}; branches: {names}")
    entries = [(e, e.new) for e in store.reflog(branch) if e.new is not None]
    entries.reverse()  # newest first: entry N is BRANCH@{N}
    if limit is not None:
        entries = entries[:limit]
    held = store.has_commits({new.hex() for _, new in entries})  # gc collects pruned commits reflogs name
    if as_json:
        emit_ndjson(
            {
                "selector": f"{branch}@{{{n}}}",
                "id": new.hex(),
                "old": e.old.hex() if e.old else None,
                "time_ns": e.time_ns,
                "message": e.message,
                "collected": new.hex() not in held,
            }
            for n, (e, new) in enumerate(entries)
        )
        return
    shorts = short_ids(new.hex() for _, new in entries)
    for n, (e, new) in enumerate(entries):
        gone = [] if new.hex() in held else [("  (pruned and collected by gc)", "dim red")]
        app.styled(
            [
                (shorts[new.hex()] + " ", "yellow"),
                (f"{branch}@{{{n}}}: ", "bold"),
                (e.message + "  ", None),
                (local_time(e.time_ns), "dim"),
                *gone,
            ]
        )


@click.command()
@click.argument("branch", metavar="BRANCH")
@click.argument("start", required=False, metavar="[START]")
@click.option("-c", "--create", "create", is_flag=True, help="Create BRANCH (at START, default HEAD) and switch to it.")
@json_option
def switch(branch: str, start: str | None, create: bool, as_json: bool) -> None:
    """Make BRANCH the current branch: HEAD names it, `HEAD`/`@` resolve to its tip, `ckpt log` and
    `ckpt resume` without REV use it, and its commits are logged in HEAD's reflog.

    `-` (or `@{-N}`) is the branch HEAD was on before (the N-th before). HEAD always names a branch: to
    look at an older checkpoint, give its revision to `ckpt show`/`log`, or start a branch there with -c.
    Checkpoint writers (CrewAI runs) never move HEAD to another branch; they move the branch they write on.

    \b
    Examples:
      ckpt switch experiment
      ckpt switch -c try-gpt main~2     # new branch at main~2, now current
      ckpt switch -                     # back to the previous branch
    """
    _switch(branch, start, create, as_json, "switch", "-c")


@click.command()
@click.argument("branch", metavar="BRANCH")
@click.argument("start", required=False, metavar="[START]")
@click.option("-b", "create", is_flag=True, help="Create BRANCH (at START, default HEAD) and switch to it.")
@json_option
def checkout(branch: str, start: str | None, create: bool, as_json: bool) -> None:
    """Same as `ckpt switch BRANCH` (git's older spelling; `-b` is `ckpt switch -c`).

    \b
    Examples:
      ckpt checkout experiment
      ckpt checkout -b try-gpt main~2
    """
    _switch(branch, start, create, as_json, "checkout", "-b")


def _switch(branch: str, start: str | None, create: bool, as_json: bool, verb: str, flag: str) -> None:
    """`ckpt switch` / `ckpt checkout`: resolve `-` / `@{-N}`, refuse a commit (no detached HEAD), switch."""
    import re

    from crewckpt.errors import UnknownRevision

    store = obj().store()
    if start is not None and not create:
        raise UsageProblem(f"START goes with {flag}: ckpt {verb} {flag} {branch} {start}")
    m = re.fullmatch(r"-|@\{-(\d+)\}", branch)
    if m and not create:
        n = int(m.group(1) or 1)
        previous = store.previous_branch(n)
        if previous is None:
            raise UnknownRevision(f"{branch}: HEAD was on fewer than {n} other branch(es); see `ckpt reflog`")
        branch = previous
    elif not create and branch not in store.branches() and branch != store.current_branch():
        target = try_resolve(store, branch)
        if target is not None:
            raise UsageProblem(f"{branch!r} is a checkpoint, not a branch (HEAD always names a branch); start a "
                               f"branch there with `ckpt {verb} {flag} NAME {branch}`")
    before = store.current_branch()
    store.switch(branch, create=create, start=start or "HEAD")
    now = store.current_branch()
    tip = store.branches().get(now)
    if as_json:
        emit_json({"branch": now, "previous": before, "tip": tip, "created": create})
    elif create:
        click.echo(f"Switched to a new branch '{now}'")
    elif now == before:
        click.echo(f"Already on '{now}'")
    else:
        click.echo(f"Switched to branch '{now}'")
