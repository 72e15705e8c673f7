"""Maintenance verbs: prune, gc, fsck, stats."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import click

from crewckpt.cli.context import UsageProblem, emit_json, json_option, obj
from crewckpt.cli.fmt import entity_summary, local_time, parse_duration_ns, short_ids, summary_fields


@click.command()
@click.option(
    "--keep", type=click.IntRange(min=1), metavar="N", help="Keep the newest N checkpoints of each branch."
)
@click.option(
    "--older-than", "older_than", metavar="AGE", help="Remove checkpoints older than AGE (7d, 12h, 30m, 2w)."
)
@click.option("--branch", "branch", metavar="B", help="Only branch B (default: each branch on its own).")
@click.option(
    "--dry-run", "-n", "dry_run", is_flag=True, help="List exactly what would be removed; change nothing."
)
@json_option
def prune(keep: int | None, older_than: str | None, branch: str | None, dry_run: bool, as_json: bool) -> None:
    """Remove old checkpoints from branches (each branch on its own; tips are always kept).

    With both --keep and --older-than, a checkpoint goes only when it is beyond the newest N and older than
    AGE. Pruned commits vanish from `list`; `log` marks where history stops. Run `ckpt gc` afterwards to
    free the space. A deleted branch's checkpoints stay listed until pruned: `ckpt prune --branch NAME`
    alone prunes all of them that no other branch reaches.

    \b
    Examples:
      ckpt prune --keep 10 --dry-run
      ckpt prune --older-than 7d --branch main
      ckpt branch -D old-idea && ckpt prune --branch old-idea && ckpt gc
    """
    if keep is None and older_than is None and not branch:
        raise UsageProblem(
            "say what to prune: --keep N and/or --older-than AGE (e.g. --keep 10, --older-than 7d)"
        )
    older_than_ns = None
    if older_than is not None:
        try:
            older_than_ns = parse_duration_ns(older_than)
        except ValueError as exc:
            raise UsageProblem(str(exc)) from None
    if branch:
        from crewckpt.history.refnames import check_branch

        branch = check_branch(branch)  # BadRefName (exit 2) before the store is even opened
    app = obj()
    store = app.store()
    branches = [branch] if branch else sorted(store.branches())
    before = {c.id: c for c in store.list(branch)}
    gone = branch is not None and _no_ref(store, branch)
    if gone and not before:  # a typo: say so as every revision does
        store.resolve(str(branch))
    if not gone and keep is None and older_than is None:
        raise UsageProblem(f"say what to prune of {branch}: --keep N and/or --older-than AGE (without them "
                           f"only a deleted branch's checkpoints go)")
    removed: list[tuple[str, str]] = []
    held: dict[str, tuple[int, list[str]]] = {}
    for name in branches:  # one walk of the other branches' history each: what goes and what they hold back
        try:
            report = store.prune_report(name, keep=keep, older_than_ns=older_than_ns, dry_run=dry_run)
        except ValueError as e:  # the branch came back meanwhile: it needs a rule again
            raise UsageProblem(str(e)) from None
        removed.extend((name, cid) for cid in report.removed)
        if report.held:
            held[name] = (report.held, report.held_by)
    if as_json:  # one object, also when nothing goes: a script always gets an answer
        emit_json({"pruned": len(removed), "dry_run": dry_run,
                   "commits": [{"id": cid, "branch": name} for name, cid in removed],
                   "held": [{"branch": name, "count": n, "by": by} for name, (n, by) in held.items()]})
        return
    verb = "would prune" if dry_run else "pruned"
    shorts = short_ids(before)
    for name, cid in removed:
        info = before.get(cid)
        when = local_time(info.time_ns) if info else "?"
        what = entity_summary(summary_fields(info)) if info else ""
        app.styled(
            [(f"{verb} ", "red"), (shorts.get(cid, cid[:8]), "yellow"), (f"  {name}  {when}  {what}", None)]
        )
    # why the rule's other candidates stay (the prune rule, docs/cli.md): other branches' history
    reasons = [f"{n} older checkpoint(s) of {name} are history of other branches ({_few(by)}); prune "
               f"those branches or delete them first" for name, (n, by) in held.items()]
    if not removed and len(reasons) == 1 and not dry_run:
        click.echo(f"0 checkpoint(s) pruned: {reasons[0]}")
        return
    for line in reasons:
        click.echo(line)
    if dry_run:
        click.echo(f"{len(removed)} checkpoint(s) would be pruned (dry run: nothing changed)")
    else:
        click.echo(
            f"{len(removed)} checkpoint(s) pruned" + ("; run `ckpt gc` to free the space" if removed else "")
        )


def _no_ref(store: Any, branch: str) -> bool:
    """Whether ``branch`` names neither a branch nor a remote-tracking ref (a deleted branch, or a typo)."""
    from crewckpt.history import refnames

    return branch not in store.branches() and store.backend.get_ref(refnames.REMOTES + branch) is None


@click.command()
@click.option("--dry-run", "-n", "dry_run", is_flag=True, help="Count what would be freed; delete nothing.")
@json_option
def gc(dry_run: bool, as_json: bool) -> None:
    """Delete objects no live checkpoint or ref reaches, repack the rest, shrink the file.

    Live means: not pruned (`ckpt prune`), or the tip of a branch or run. Reflog entries do not keep a
    pruned checkpoint: after gc, `BRANCH@{N}` naming one says it was pruned and collected.

    \b
    Example:
      ckpt prune --keep 20 && ckpt gc
    """
    app = obj()
    store = app.store()
    start = time.perf_counter()
    with app.progress("gc: scanning objects") as update:
        report = store.gc(dry_run=dry_run, progress=update)
    record = _report_dict(report)
    until_ns = record.pop("kept_until_ns")
    until_s = None if until_ns is None else -(-until_ns // 1_000_000_000)  # whole seconds, rounded up
    record["kept_until"] = None if until_s is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(until_s))
    record["seconds"] = round(time.perf_counter() - start, 3)
    if dry_run:
        record["bytes_after"] = None  # not a prediction: repacking and VACUUM decide it
    if as_json:
        emit_json(record)
        return
    # packs repacking replaced are counted apart: "deleted 3 objects (3.3 MB)" on a store with nothing
    # unreachable read as lost data
    n_packs = record["deleted_packs"]
    freed = (f"{record['deleted_objects'] - n_packs} unreachable object(s) "
             f"({human_bytes(record['deleted_bytes'] - record['deleted_pack_bytes'])} uncompressed)")
    if n_packs:
        freed += f" and {n_packs} pack(s) that repacking replaced"
    kept = ""
    if until_s is not None:  # otherwise "deleted 0" right after a prune looks like a bug
        why = " (shared store)" if record["grace_shared"] else ""
        kept = (f"; {record['kept_young']} unreachable object(s) kept: younger than the {record['grace_s']:g} s "
                f"grace{why}; run gc again after {time.strftime('%H:%M:%S', time.localtime(until_s))}"
                if record["grace_s"] else  # no grace: they were written while gc ran (a writer at work)
                f"; {record['kept_young']} unreachable object(s) kept: written while gc ran; run gc again to "
                f"collect them once no writer needs them")
    if dry_run:  # the size after repacking and VACUUM is not predicted: say only what is known
        app.line(f"gc --dry-run: store on disk {human_bytes(record['bytes_before'])} now; gc would free {freed} "
                 f"and compact the file; {record['live_objects']} live{kept}; nothing changed "
                 f"({record['seconds']} s)")
        return
    app.line(
        f"gc: deleted {freed}; {record['live_objects']} live; store on disk {human_bytes(record['bytes_before'])} "
        f"-> {human_bytes(record['bytes_after'])} in {record['seconds']} s{kept}"
    )


@click.command()
@click.option("--full", is_flag=True, help="Also read every object and verify its hash (slower).")
@click.option("--rebuild-index", "rebuild", is_flag=True,
              help="First rebuild the commit index (a cache) from the objects, refs and reflogs, then check.")
@json_option
def fsck(full: bool, rebuild: bool, as_json: bool) -> None:
    """Check the store: refs, commits, trees, and with --full every object's hash.

    Exit status 1 when a problem is found; each problem is one line naming what is affected.
    --rebuild-index repairs a lost or damaged commit index: every commit the refs and reflogs reach (through
    parents) becomes live again, with its branch and local order; nothing stored is removed.

    \b
    Example:
      ckpt fsck --full
      ckpt fsck --rebuild-index
    """
    app = obj()
    store = app.store()
    start = time.perf_counter()
    rebuilt = None
    if rebuild:
        with app.progress("rebuild index") as update:
            rebuilt = store.rebuild_index(progress=update)
        if not as_json:
            app.line(f"index rebuilt: {rebuilt.rows} live checkpoint(s); {rebuilt.added} added, {rebuilt.dropped} "
                     f"dropped, {rebuilt.rewritten} corrected, {rebuilt.renumbered} renumbered, {rebuilt.aliases} "
                     f"alias(es) restored")
            for p in rebuilt.problems:
                app.line(f"problem: {p}", "red")
    with app.progress("fsck --full" if full else "fsck") as update:
        report = store.fsck(full=full, progress=update)
    problems = [
        f"object {oid}: {why}" + _needed_by(oid, report.affected) for oid, why in report.broken.items()
    ]
    problems += list(report.problems)
    record = {
        "ok": report.ok,
        "full": full,
        "checked": report.checked,
        "other_checked": report.other_checked,
        "broken": report.broken,
        "affected": report.affected,
        "problems": list(report.problems),
        "stale_rows": report.stale_rows,
        "seconds": round(time.perf_counter() - start, 3),
    }
    if rebuilt is not None:
        record["rebuild_index"] = dataclasses.asdict(rebuilt)
    if as_json:
        emit_json(record)
    else:
        for problem in problems:
            app.line(f"problem: {problem}", "red")
        for cid, oids in list(report.affected.items())[:20]:
            app.line(f"damaged checkpoint: {cid[:12]} needs {len(oids)} broken object(s)", "red")
        if len(report.affected) > 20:
            app.line(f"... and {len(report.affected) - 20} more damaged checkpoint(s) (--json lists all)", "red")
        verdict = (
            "ok" if report.ok else f"{len(problems)} problem(s); affected commits: {len(report.affected_commits)}"
            + _named(report.affected_commits)
        )
        other = f" (+ {report.other_checked} outside them: packs, dictionaries, pruned leftovers)" if full else ""
        app.line(
            f"fsck{' --full' if full else ''}: checked {report.checked} objects of live checkpoints{other} "
            f"in {record['seconds']} s: {verdict}",
            "green" if report.ok else "red",
        )
    if not report.ok:
        raise click.exceptions.Exit(1)


def _named(cids: list[str], most: int = 5) -> str:
    """`` (ID, ID, ...)``: the short ids of the first ``most`` affected commits, or "" for none."""
    if not cids:
        return ""
    more = f", +{len(cids) - most} more" if len(cids) > most else ""
    return f" ({', '.join(c[:12] for c in cids[:most])}{more})"


def _needed_by(oid: str, affected: dict[str, list[str]]) -> str:
    users = [cid[:12] for cid, oids in affected.items() if oid in oids]
    return (
        f"; needed by {len(users)} commit(s): {' '.join(users[:5])}{' ...' if len(users) > 5 else ''}"
        if users
        else ""
    )


@click.command()
@json_option
def stats(as_json: bool) -> None:
    """Objects, stored and logical bytes, dedup and compression ratios, and per-branch figures.

    Logical bytes: the checkpoints as CrewAI would write them (compact JSON, each in full). Stored bytes:
    what the store holds on disk for them. Ratio = logical / stored.

    \b
    Example:
      ckpt stats --json | jq .total_ratio
    """
    app = obj()
    record = _report_dict(obj().store().stats())
    if as_json:
        emit_json(record)
        return
    per_branch = record.get("branches") or {}
    rows = [
        ("objects", str(record["objects"] - record.get("packs", 0)),
         f"+ {record['packs']} pack(s) holding them" if record.get("packs") else ""),
        ("commits", f"{record['commits']} on {len(per_branch)} branch(es)", ""),
        ("logical", human_bytes(record["logical_bytes"]), "every checkpoint in full as compact JSON (as a whole-document "
                                                          "writer such as CrewAI's writes each)"),
        ("stored", human_bytes(record["stored_bytes"]), "objects as stored (deduplicated, compressed)"),
        ("on disk", human_bytes(record["file_bytes"]), "the store's database files (other files in its folder not counted)"),
        ("dedup", f"{record['dedup_ratio']:.2f}x", "logical / unique object bytes"),
        ("compression", f"{record['compression_ratio']:.2f}x", "unique object bytes / stored"),
        ("total", f"{record['total_ratio']:.2f}x", "logical / stored"),
    ]
    for key, value, note in rows:
        app.styled([(f"{key:<12} ", "bold"), (f"{value:<22}", None), (note, "dim")])
    if per_branch:
        width = max(6, *(len(n) for n in per_branch))
        app.line("")
        app.line(f"{'branch':<{width}}  {'commits':>7}  {'logical':>10}", "bold")
        for name, figures in sorted(per_branch.items()):
            app.line(f"{name:<{width}}  {figures['commits']:>7}  {human_bytes(figures['logical_bytes']):>10}")
        app.line("(commits written on each branch: history a fork shares counts on the branch that wrote it)", "dim")


def _report_dict(report: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(report) and not isinstance(report, type):
        return dataclasses.asdict(report)
    if hasattr(report, "to_json"):
        return dict(report.to_json())
    if hasattr(report, "_asdict"):
        return dict(report._asdict())
    return dict(report)


def human_bytes(n: int) -> str:
    """1536 -> "1.5 KB" (crewckpt.history.diff.human_bytes, imported only when printing)."""
    from crewckpt.history.diff import human_bytes as fmt

    return fmt(n)


def _print_report(app: Any, title: str, record: dict[str, Any]) -> None:
    """Key/value lines under a title (byte counts also in human units)."""
    app.line(title, "bold")
    width = max((len(k) for k in record), default=0)
    for key, value in record.items():
        shown = f"{human_bytes(value)} ({value})" if "bytes" in key and isinstance(value, int) else value
        app.line(f"  {key:<{width}}  {shown}")


def _few(names: list[str], shown: int = 5) -> str:
    """``names`` for one line: the first ``shown``, then how many more (--json lists them all)."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"
