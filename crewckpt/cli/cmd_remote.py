"""Remote verbs, as in git: remote (add, remove, -v), clone, fetch, pull, push; and publish (runs)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import click

from crewckpt.backends.registry import redact
from crewckpt.cli.context import UsageProblem, emit_json, json_option, obj
from crewckpt.cli.fmt import safe_text
from crewckpt.history.remotes import trust_remote

if TYPE_CHECKING:
    from crewckpt.history.remotes import SyncReport


@click.command()
@click.argument("action", required=False, type=click.Choice(["add", "remove", "rm", "trust", "prune"]))
@click.argument("name", required=False)
@click.argument("location", required=False)
@click.option("-v", "--verbose", is_flag=True, help="Show each remote's location.")
@click.option("--no-check", is_flag=True,
              help="add: record a local LOCATION even though no store is there (yet).")
@click.option("--dry-run", "-n", is_flag=True, help="prune: say which refs would go; change nothing.")
@json_option
def remote(action: str | None, name: str | None, location: str | None, verbose: bool, no_check: bool,
           dry_run: bool, as_json: bool) -> None:
    """List remotes, or add NAME at LOCATION, or remove NAME (and its remote-tracking refs), or trust NAME,
    or prune NAME (delete the remote-tracking refs of branches NAME no longer has; nothing is fetched).

    `add` checks that a local LOCATION (a folder, `sqlite:PATH`) holds a store, so a typo is caught at once;
    `--no-check` records it anyway (a store you create later). URLs are not contacted.

    A remote that came with the store (a copied folder, someone else's store) is used by name only after
    `ckpt remote trust NAME`: its location is data someone else wrote.

    A LOCATION is anything `--store` takes: a store folder, `sqlite:PATH`, `postgresql://...`. It is kept in
    this store's own config.

    \b
    Examples:
      ckpt remote add origin /shared/team.ckpt
      ckpt remote add --no-check backup /mnt/usb/team.ckpt
      ckpt remote -v
      ckpt remote remove origin
      ckpt remote trust origin
      ckpt remote prune origin
    """
    if no_check and action != "add":
        raise UsageProblem("--no-check goes with `ckpt remote add NAME LOCATION`")
    if dry_run and action != "prune":
        raise UsageProblem("--dry-run goes with `ckpt remote prune NAME`")
    store = obj().store()
    if action == "prune":
        if not name or location:
            raise UsageProblem("usage: ckpt remote prune [--dry-run] NAME")
        from crewckpt.history.remotes import prune_remote
        _report(prune_remote(store, name, dry_run=dry_run), as_json)
        return
    if action == "add":
        if not name or not location:
            raise UsageProblem("usage: ckpt remote add NAME LOCATION")
        loc = store.add_remote(name, location, check=not no_check)
        if as_json:
            emit_json({"added": name, "location": redact(loc)})
        else:
            click.echo(f"Added remote {safe_text(name)} ({safe_text(redact(loc))}); `{obj().command('fetch', name)}` brings its branches")
        return
    if action == "trust":
        if not name or location:
            raise UsageProblem("usage: ckpt remote trust NAME")
        loc = trust_remote(store, name)
        if as_json:
            emit_json({"trusted": name, "location": redact(loc)})
        else:
            click.echo(f"Trusted remote {safe_text(name)} ({safe_text(redact(loc))}) for this store on this machine")
        return
    if action in ("remove", "rm"):
        if not name or location:
            raise UsageProblem("usage: ckpt remote remove NAME")
        refs = store.remove_remote(name)
        if as_json:
            emit_json({"removed": name, "refs": refs})
        else:
            click.echo(f"Removed remote {name} and {len(refs)} remote-tracking ref(s)")
        return
    if name or location:
        raise UsageProblem("usage: ckpt remote [-v] | ckpt remote add NAME LOCATION | ckpt remote remove NAME | "
                           "ckpt remote trust NAME | ckpt remote prune NAME")
    conf = store.remotes()
    if as_json:
        emit_json([{"name": n, "location": redact(loc)} for n, loc in conf.items()])
        return
    for n, loc in conf.items():  # redact: a remote recorded by an older crewckpt may hold a password
        # escaped, not stripped (click drops ANSI sequences off a terminal): the user trusts what is stored
        click.echo(f"{safe_text(n)}\t{safe_text(redact(loc))}" if verbose else safe_text(n))


def _report(rep: SyncReport, as_json: bool) -> None:
    """Human or JSON output of a transfer, like git's ref-update lines."""
    if as_json:
        emit_json(rep.to_json())
        return
    app = obj()
    # the user's side of the transfer: push/publish send, fetch/pull/clone receive
    incoming = rep.verb in ("fetch", "pull", "clone")
    verb = ("would fetch" if incoming else "would send") if rep.dry_run else ("fetched" if incoming else "sent")
    if rep.verb == "prune":
        n = len(rep.refs)
        click.echo(f"prune {rep.remote}: {'would delete' if rep.dry_run else 'deleted'} {n} stale remote-tracking "
                   f"ref(s)", err=True)
    else:
        click.echo(f"{rep.verb} {rep.remote}: {verb} {rep.commits} checkpoint(s), {rep.objects} object(s), "
                   f"{_size(rep.bytes)} in {rep.seconds:.2f} s", err=True)
    for r in rep.refs:
        old, new = (r.old or "")[:8], (r.new or "")[:8]
        arrow = {"new": f"* [new]           -> {new}", "up-to-date": f"= [up to date]    {new}",
                 "fast-forward": f"  {old}..{new}", "forced": f"+ {old}...{new} (forced)",
                 "rejected": "! [rejected]", "pruned": f"- [deleted]       {old} ->",
                 "new-lineage": f"+ {old}...{new} (new lineage)", "kept": f"= [kept]          {old}",
                 "skipped": "  [skipped]"}.get(r.status, r.status)
        line = f" {arrow}  {r.ref}" + (f"  ({r.reason})" if r.reason else "")
        if r.status == "rejected":
            app.line(line, "red")
        else:
            app.line(line)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


@click.command()
@click.argument("src")
@click.argument("dest")
@click.option("-o", "--origin", default="origin", show_default=True, help="Name of the remote that names SRC.")
@json_option
def clone(src: str, dest: str, origin: str, as_json: bool) -> None:
    """Copy the store at SRC into a new store at DEST: every branch, with `origin/<branch>` remote-tracking
    refs and remote `origin` naming SRC. Running it again on an interrupted clone finishes it.

    \b
    Examples:
      ckpt clone /shared/team.ckpt .ckpt
      ckpt clone postgresql://db/ckpt ./local.ckpt
    """
    from crewckpt.history import remotes
    from crewckpt.history.store import Store

    with obj().progress(f"clone {src}") as update:
        d, rep = remotes.clone(Store, src, dest, origin=origin, progress=update)
    d.close()
    _report(rep, as_json)


@click.command()
@click.argument("remote", required=False)
@click.argument("branches", nargs=-1)
@click.option("--dry-run", "-n", is_flag=True, help="Say what would move; change nothing.")
@click.option("--prune", "-p", is_flag=True,
              help="Also delete the REMOTE/BRANCH refs of branches REMOTE no longer has.")
@json_option
def fetch(remote: str | None, branches: tuple[str, ...], dry_run: bool, prune: bool, as_json: bool) -> None:
    """Bring REMOTE's branches (default: all of them; default remote `origin`) and the checkpoints they need;
    they show up as `REMOTE/BRANCH` (`ckpt log origin/main`). Local branches do not move. A branch deleted on
    REMOTE keeps its `REMOTE/BRANCH` until `--prune` (or `ckpt remote prune REMOTE`), as in git.

    \b
    Examples:
      ckpt fetch
      ckpt fetch origin main
      ckpt fetch --prune
    """
    app = obj()
    with app.progress(f"fetch {remote or 'origin'}") as update:
        rep = app.store().fetch(remote, list(branches) or None, dry_run=dry_run, progress=update, prune=prune)
    _report(rep, as_json)


@click.command()
@click.argument("remote", required=False)
@click.argument("branch", required=False)
@click.option("--dry-run", "-n", is_flag=True, help="Say what would move; change nothing.")
@json_option
def pull(remote: str | None, branch: str | None, dry_run: bool, as_json: bool) -> None:
    """Fetch BRANCH (default: the current branch) from REMOTE (default `origin`) and fast-forward the local
    branch to it. A branch that has diverged is refused (pull never merges): the message shows both tips.

    \b
    Examples:
      ckpt pull
      ckpt pull origin exp
    """
    app = obj()
    with app.progress(f"pull {remote or 'origin'}") as update:
        rep = app.store().pull(remote, branch, dry_run=dry_run, progress=update)
    _report(rep, as_json)


@click.command()
@click.argument("remote", required=False)
@click.argument("branch", required=False)
@click.option("--all", "all_branches", is_flag=True, help="Push every local branch.")
@click.option("-f", "--force", is_flag=True, help="Replace the remote's branch even when that loses its commits.")
@click.option("--dry-run", "-n", is_flag=True, help="Say what would move; change nothing.")
@json_option
def push(remote: str | None, branch: str | None, all_branches: bool, force: bool, dry_run: bool,
         as_json: bool) -> None:
    """Send BRANCH (default, or HEAD: the current branch; `--all`: every branch) to REMOTE (default `origin`, or a
    location) and move the remote's branch of the same name. A push that would lose the remote's
    checkpoints (not a fast-forward) is rejected unless --force; if another pusher moved the branch first,
    this one is rejected: nothing is lost. Exit status 1 when a branch was rejected.

    \b
    Examples:
      ckpt push
      ckpt push origin exp
      ckpt push --all /shared/team.ckpt
    """
    if all_branches and branch:
        raise UsageProblem("give a BRANCH or --all, not both")
    app = obj()
    with app.progress(f"push {remote or 'origin'}") as update:
        rep = app.store().push(remote, branch, all_branches=all_branches, force=force, dry_run=dry_run,
                               progress=update, check=False)
    _report(rep, as_json)
    if rep.rejected:
        if not as_json:
            click.echo("ckpt: error: some branches were rejected; each line above says what to do",
                       err=True)
        raise SystemExit(1)


@click.command()
@click.argument("remote", required=False)
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@click.option("--dry-run", "-n", is_flag=True, help="Say what would move; change nothing.")
@json_option
def publish(remote: str | None, runs: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Publish runs to REMOTE (default `origin`, or a location): each run under its own ref
    `refs/runs/<run id>`, and its branch when no tip loses its name there (a fast-forward, or a new lineage
    whose previous run keeps its run ref; a branch holding checkpoints pushed by hand is kept). What
    `CheckpointConfig(push_to=...)` does when a run ends; use it for runs whose push failed (the remote was
    down), or from scripts. RUN: run ids (`ckpt log --all` shows `refs/runs/<id>`); default every run of this
    store, oldest first. Exit status 1 when a run ref was rejected.

    \b
    Examples:
      ckpt publish team
      ckpt publish -n team
      ckpt publish /shared/team.ckpt run-3f2a9c1d04be --json
    """
    from crewckpt.history import remotes
    from crewckpt.history.publish import publish_run

    app = obj()
    store = app.store()
    known = store.runs()
    names = list(runs) or sorted(known, key=lambda r: store.info(known[r]).seq)
    total = remotes.SyncReport(verb="publish", dry_run=dry_run)
    with remotes.connect(store, remote) as (label, other):
        total.remote = remotes._where(other, label)
        for run in names:
            rep = publish_run(store, other, run, name=label, dry_run=dry_run)
            total.commits += rep.commits
            total.objects += rep.objects
            total.bytes += rep.bytes
            total.seconds += rep.seconds
            total.refs += rep.refs
    if as_json:
        _report(total, True)
    else:  # like git push: changed refs only (the JSON lists every ref)
        quiet = {"skipped"} if runs else {"skipped", "up-to-date"}
        shown = dataclasses.replace(total, refs=[r for r in total.refs if r.status not in quiet])
        _report(shown, False)
        if not shown.refs:
            click.echo(f"Everything up-to-date ({len(names)} run(s))")
    if total.rejected:
        if not as_json:
            click.echo("ckpt: error: some runs were rejected; each line above says why", err=True)
        raise SystemExit(1)
