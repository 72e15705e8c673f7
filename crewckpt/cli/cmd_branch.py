"""Branch verbs: branch (list, create, delete, rename) and fork."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from crewckpt.cli.context import UsageProblem, emit_json, emit_ndjson, json_option, obj, paged, try_resolve
from crewckpt.cli.fmt import entity_summary, local_time, short_ids, summary_fields

if TYPE_CHECKING:
    from crewckpt.history.store import Store


@click.command()
@click.argument("name", required=False)
@click.argument("rev", required=False)
@click.option(
    "-d", "--delete", "delete", metavar="NAME", help="Delete branch NAME (its commits stay until pruned)."
)
@click.option("-m", "--move", "move", nargs=2, metavar="OLD NEW", help="Rename branch OLD to NEW.")
@json_option
def branch(
    name: str | None, rev: str | None, delete: str | None, move: tuple[str, str] | None, as_json: bool
) -> None:
    """List branches, or create branch NAME at REV (default HEAD).

    \b
    Examples:
      ckpt branch                        # list, with each tip
      ckpt branch try-gpt main~2         # new branch at main~2
      ckpt branch -m try-gpt experiment  # rename
      ckpt branch -d experiment          # delete the ref
    """
    app = obj()
    if sum(x is not None for x in (name, delete, move)) > 1:
        raise UsageProblem("use one of: ckpt branch NAME [REV], ckpt branch -d NAME, ckpt branch -m OLD NEW")
    store = app.store()
    if delete is not None:
        tip = store.resolve(delete) if delete in store.branches() else None
        store.delete_branch(delete)
        if as_json:
            emit_json({"deleted": delete, "tip": tip})
        else:
            click.echo(f"Deleted branch {delete} (was {tip[:8] if tip else '?'})")
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
    _list_branches(store, as_json)


def _list_branches(store: Store, as_json: bool) -> None:
    """Every branch with its tip; ``*`` marks the branch whose tip is HEAD (the latest commit)."""
    app = obj()
    branches = store.branches()
    head = try_resolve(store, "HEAD")  # None in an empty store
    infos = {name: store.info(tip) for name, tip in branches.items()}
    if as_json:
        emit_ndjson(
            {
                "branch": name,
                "tip": tip,
                "time_ns": infos[name].time_ns,
                "summary": infos[name].to_json()["summary"],
                "head": tip == head,
            }
            for name, tip in sorted(branches.items())
        )
        return
    if not branches:
        click.echo("no branches yet: commit a checkpoint first", err=True)
        return
    shorts = short_ids(branches.values())
    width = max(len(n) for n in branches)
    for name, tip in sorted(branches.items()):
        mark = "*" if tip == head else " "
        app.styled(
            [
                (f"{mark} ", "green"),
                (name.ljust(width) + "  ", "green" if tip == head else "cyan"),
                (shorts[tip] + "  ", "yellow"),
                (local_time(infos[name].time_ns) + "  ", "dim"),
                (entity_summary(summary_fields(infos[name])), None),
            ]
        )


@click.command()
@click.argument("rev")
@click.option("--branch", "name", metavar="NAME", help="Name of the new branch (default fork/<short id>).")
@json_option
def fork(rev: str, name: str | None, as_json: bool) -> None:
    """Start a new branch at checkpoint REV, to resume from there with other inputs.

    The branch is a ref only (nothing is copied). Checkpoints written by a crew resumed from it go on
    the new branch: `ckpt resume NAME --inputs '{...}'`.

    \b
    Examples:
      ckpt fork main~3 --branch try-sea-otters
      ckpt resume try-sea-otters --inputs '{"topic": "sea otters"}'
    """
    store = obj().store()
    target = store.resolve(rev)
    if name is None:
        existing = store.branches()
        name = f"fork/{target[:8]}"
        n = 2
        while name in existing:
            name = f"fork/{target[:8]}-{n}"
            n += 1
    store.create_branch(name, target)
    if as_json:
        emit_json({"branch": name, "tip": target, "rev": rev})
    else:
        click.echo(f"Forked {rev} ({target[:8]}) as branch {name}")
        click.echo(f"Resume it with: ckpt resume {name} [--inputs JSON]")


@click.command()
@click.argument("branch", default="main")
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=0), help="Show at most N entries.")
@json_option
@paged
def reflog(branch: str, limit: int | None, as_json: bool) -> None:
    """Where branch BRANCH has pointed, newest first: the positions `BRANCH@{N}` names.

    Each commit, fork, reset or rename that moved the branch is one entry; deleting a branch deletes its
    reflog.

    \b
    Examples:
      ckpt reflog main -n 5
      ckpt show main@{2} --path entities[0].checkpoint_inputs
    """
    app = obj()
    store = app.store()
    if branch not in store.branches():
        from crewckpt.errors import UnknownRevision

        names = ", ".join(store.branches()) or "none yet"
        raise UnknownRevision(f"no branch named {branch!r}; branches: {names}")
    entries = [e for e in store.reflog(branch) if e.new is not None]
    entries.reverse()  # newest first: entry N is BRANCH@{N}
    if limit is not None:
        entries = entries[:limit]
    if as_json:
        emit_ndjson(
            {
                "selector": f"{branch}@{{{n}}}",
                "id": e.new.hex(),
                "old": e.old.hex() if e.old else None,
                "time_ns": e.time_ns,
                "message": e.message,
            }
            for n, e in enumerate(entries)
        )
        return
    shorts = short_ids(e.new.hex() for e in entries)
    for n, e in enumerate(entries):
        app.styled(
            [
                (shorts[e.new.hex()] + " ", "yellow"),
                (f"{branch}@{{{n}}}: ", "bold"),
                (e.message + "  ", None),
                (local_time(e.time_ns), "dim"),
            ]
        )
