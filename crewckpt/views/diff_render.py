"""Text rendering of a "crewckpt.diff/1" result (see crewckpt.views.diff), independent of any UI library.

Renderers return a list of ``(tag, text)`` lines. Tags name the kind of line, not a colour, so the CLI
(rich) and the TUI (Textual) can style them their own way:

    "header"  section heading          "added"    an added item or + line
    "removed" a removed item or - line "changed"  a changed item
    "hunk"    a unified-diff @@ line   "meta"     --- / +++ lines and side notes
    "plain"   anything else

`render_stat` fits one screen (sections summarised, at most `max_items` items per list);
`render_full` adds the unified diffs of task outputs, flow state changes and every other changed path.
"""

from __future__ import annotations

import re
from typing import Any

from crewckpt.history.diff import Line, human_bytes, plain_text, render_changes, short
from crewckpt.history.linediff import FastMatcher

__all__ = ["Line", "human_bytes", "plain_text", "render_full", "render_stat"]  # the first three: crewckpt.history.diff

_OP_MARK = {"added": "+", "removed": "-", "changed": "~", "unchanged": " "}
_OP_TAG = {"added": "added", "removed": "removed", "changed": "changed", "unchanged": "plain"}


# Fields CrewAI re-serialises on every checkpoint without a user-visible change: a task's embedded copy of its
# agent, an agent's executor flow. The summary leaves out items whose only changes are these.
INTERNAL_TASK_FIELDS = frozenset({"agent"})
INTERNAL_AGENT_FIELDS = frozenset({"agent_executor"})


def render_stat(diff: dict[str, Any], *, max_items: int = 8) -> list[Line]:
    """A one-screen summary: inputs, per-entity task table, agents, flow, events, sizes, other changes.

    Tasks and agents whose only changes are CrewAI-internal copies are counted, not listed, and CrewAI's
    agent-executor flows and restore placeholders are summed up in one line each.
    """
    return _summary(diff, max_items, terse=True)


def _summary(diff: dict[str, Any], max_items: int, *, terse: bool) -> list[Line]:
    lines: list[Line] = []
    if diff["identical"]:
        return [("plain", "no differences")]
    lines += _inputs_lines(diff["inputs"], max_items)
    for entity in diff["entities"]:
        if entity["role"] == "main":
            lines += _entity_lines(entity, max_items, terse)
    lines += _internal_entity_lines(diff["entities"])
    lines += _events_lines(diff["events"], max_items)
    lines += _size_lines(diff["sizes"])
    other = len(diff["changes"]) + diff["changes_truncated"]
    if other:
        shown = ", ".join(c["path"] for c in diff["changes"][:3])
        more = f", ... ({other} in all)" if other > 3 else ""
        lines.append(("header", "other"))
        lines.append(("changed", f"  ~ {shown}{more}"))
    return lines


def render_full(diff: dict[str, Any], *, max_items: int = 1000, word_diff: bool = False) -> list[Line]:
    """The summary followed by output diffs, flow state changes and all other changed paths.

    ``word_diff``: show each changed run of output lines as one line per new line with the changed words
    marked ``[-old-]{+new+}`` (git's ``--word-diff=plain``), tagged "changed"; LLM answers are often one
    long paragraph where a line diff only says "everything changed".
    """
    lines = _summary(diff, max_items, terse=False)
    if diff["identical"]:
        return lines
    for entity in diff["entities"]:
        for task in entity["tasks"]:
            if task["output_diff"]:
                lines.append(("plain", ""))
                lines.append(("header", f"output of {entity['label']} / {_task_name(task)}"))
                if word_diff:
                    lines += _word_lines(task["output_diff"])
                else:
                    lines += _unified_lines(task["output_diff"])
        for agent in entity["agents"]:
            if agent["memory"] is not None:
                lines.append(("plain", ""))
                lines.append(("header", f"memory of agent {agent['role'] or agent['id']}"))
                lines.append(("removed", f"- {short(agent['memory']['old'], 400)}"))
                lines.append(("added", f"+ {short(agent['memory']['new'], 400)}"))
        flow = entity["flow"]
        if flow and flow["state"]:
            lines.append(("plain", ""))
            kind = {"executor": " (agent executor)", "placeholder": " (restore placeholder)"}.get(
                entity["role"], ""
            )
            lines.append(("header", f"state of {entity['label']}{kind}"))
            lines += render_changes(flow["state"])
    if diff["changes"]:
        lines.append(("plain", ""))
        lines.append(("header", "other changes"))
        lines += render_changes(diff["changes"])
        if diff["changes_truncated"]:
            lines.append(("meta", f"  ... and {diff['changes_truncated']} more"))
    return lines


# ---------------------------------------------------------------------------------------------------


def _inputs_lines(inputs: dict[str, Any], max_items: int) -> list[Line]:
    items: list[Line] = []
    for key, change in inputs["changed"].items():
        items.append(("changed", f"  ~ {key}: {short(change['old'])} -> {short(change['new'])}"))
    for key, value in inputs["added"].items():
        items.append(("added", f"  + {key}: {short(value)}"))
    for key, value in inputs["removed"].items():
        items.append(("removed", f"  - {key}: {short(value)}"))
    if not items:
        return []
    return [("header", "inputs")] + _cap(items, max_items)


def _entity_lines(entity: dict[str, Any], max_items: int, terse: bool) -> list[Line]:
    tasks = entity["tasks"]
    changed_tasks = [t for t in tasks if t["op"] != "unchanged"]
    agents = [a for a in entity["agents"] if a["op"] != "unchanged"]
    hidden = 0
    if terse:
        shown_tasks = [t for t in changed_tasks if not _internal_only(t, "old_status", INTERNAL_TASK_FIELDS)]
        shown_agents = [a for a in agents if not _internal_only(a, None, INTERNAL_AGENT_FIELDS)]
        hidden = len(changed_tasks) - len(shown_tasks) + len(agents) - len(shown_agents)
        changed_tasks, agents = shown_tasks, shown_agents
    flow = entity["flow"]
    flow_changed = bool(
        flow
        and (
            flow["state"]
            or flow["completed_methods"]["added"]
            or flow["completed_methods"]["removed"]
            or any(flow["method_counts"].values())
        )
    )
    if entity["op"] == "unchanged" or (
        entity["op"] == "changed" and not changed_tasks and not agents and not flow_changed and not hidden
    ):
        return []
    mark = _OP_MARK[entity["op"]]
    head = f"{mark} {entity['label']}"
    if tasks:
        head += f"  tasks {_done(tasks, 'old_status')} -> {_done(tasks, 'new_status')}"
    lines: list[Line] = [("header", head)]
    if entity["op"] in ("added", "removed"):
        return lines
    items: list[Line] = []
    for task in changed_tasks:
        status = task["old_status"] if task["op"] == "removed" else task["new_status"]
        if task["op"] == "changed" and task["old_status"] != task["new_status"]:
            status = f"{task['old_status']} -> {task['new_status']}"
        detail = ""
        if task["output_diff"]:
            detail = f"  output +{task['output_lines']['added']} -{task['output_lines']['removed']} lines"
        elif task["op"] == "changed":
            detail = "  " + ", ".join(task["fields"][:4])
        items.append((_OP_TAG[task["op"]], f"  {_OP_MARK[task['op']]} {_task_name(task)}  {status}{detail}"))
    for agent in agents:
        what = "memory changed" if agent["memory"] is not None else ", ".join(agent["fields"][:4])
        items.append(
            (_OP_TAG[agent["op"]], f"  {_OP_MARK[agent['op']]} agent {agent['role'] or agent['id']}  {what}")
        )
    if hidden:
        items.append(("meta", f"  ({hidden} task(s)/agent(s) with only CrewAI-internal copies changed)"))
    if flow_changed and flow:
        methods = flow["completed_methods"]
        parts = [f"+{m}" for m in methods["added"]] + [f"-{m}" for m in methods["removed"]]
        if parts:
            more = f" ... ({len(parts)} in all)" if len(parts) > 6 else ""
            items.append(("changed", f"  ~ completed methods {' '.join(parts[:6])}{more}"))
        if flow["state"]:
            paths = ", ".join(c["path"].removeprefix("checkpoint_state.") for c in flow["state"][:4])
            more = ", ..." if len(flow["state"]) > 4 else ""
            items.append(("changed", f"  ~ state {len(flow['state'])} changes: {paths}{more}"))
    return lines + _cap(items, max_items)


def _internal_only(item: dict[str, Any], status: str | None, internal: frozenset[str]) -> bool:
    """A changed item whose status held and whose only changed fields are CrewAI-internal copies."""
    if item["op"] != "changed" or item.get("output_diff") or item.get("memory") is not None:
        return False
    if status is not None and item[status] != item["new_status"]:
        return False
    return bool(item["fields"]) and set(item["fields"]) <= internal


_ROLE_LINE = {
    "executor": "agent executors (CrewAI's per-agent flows)",
    "placeholder": "restore placeholders (CrewAI's stand-in flows)",
}


def _internal_entity_lines(entities: list[dict[str, Any]]) -> list[Line]:
    """One line per kind of CrewAI-internal entity: how many were added, removed, changed."""
    lines: list[Line] = []
    for role, title in _ROLE_LINE.items():
        ops = [e["op"] for e in entities if e["role"] == role]
        parts = [f"{ops.count(op)} {op}" for op in ("added", "removed", "changed") if ops.count(op)]
        if parts:
            lines.append(("changed", f"~ {title}: {', '.join(parts)}"))
    return lines


def _events_lines(events: dict[str, Any] | None, max_items: int) -> list[Line]:
    if not events or (
        not events["added_total"] and not events["removed_total"] and not events["changed_total"]
    ):
        return []
    head = (
        f"events {events['old_count']} -> {events['new_count']}"
        f"  (+{events['added_total']} -{events['removed_total']} ~{events['changed_total']})"
    )
    lines: list[Line] = [("header", head)]
    if events["added"]:
        shown = list(events["added"].items())[:max_items]
        lines.append(("added", "  + " + ", ".join(f"{n} {t}" for t, n in shown)))
    if events["removed"]:
        shown = list(events["removed"].items())[:max_items]
        lines.append(("removed", "  - " + ", ".join(f"{n} {t}" for t, n in shown)))
    return lines


def _size_lines(sizes: dict[str, int]) -> list[Line]:
    delta = sizes["delta_bytes"]
    sign = "+" if delta >= 0 else ""
    return [
        (
            "header",
            (
                f"size {human_bytes(sizes['old_bytes'])} -> {human_bytes(sizes['new_bytes'])}"
                f" ({sign}{human_bytes(delta)})"
            ),
        )
    ]


def _unified_lines(text: str) -> list[Line]:
    out: list[Line] = []
    for line in text.splitlines():
        if line.startswith(("---", "+++")):
            out.append(("meta", line))
        elif line.startswith("@@"):
            out.append(("hunk", line))
        elif line.startswith("+"):
            out.append(("added", line))
        elif line.startswith("-"):
            out.append(("removed", line))
        else:
            out.append(("plain", line))
    return out


_WORD = re.compile(r"\S+[^\S\n]*|\n|[^\S\n]+")  # a word with the blanks after it; newlines alone


def _word_lines(text: str) -> list[Line]:
    """A unified diff re-rendered as a word diff: each -/+ run becomes lines with [-..-]{+..+} marks."""
    out: list[Line] = []
    removed: list[str] = []
    added: list[str] = []

    def flush() -> None:
        if removed or added:
            marked = _mark_words("\n".join(removed), "\n".join(added))
            out.extend(("changed", line) for line in marked.split("\n"))
            removed.clear()
            added.clear()

    for line in text.splitlines():
        if line.startswith(("---", "+++")):
            flush()
            out.append(("meta", line))
        elif line.startswith("@@"):
            flush()
            out.append(("hunk", line))
        elif line.startswith("-"):
            removed.append(line[1:])
        elif line.startswith("+"):
            added.append(line[1:])
        else:
            flush()
            out.append(("plain", line.removeprefix(" ")))
    flush()
    return out


def _mark_words(old: str, new: str) -> str:
    """``new`` with the words that differ from ``old`` marked: ``[-removed-]`` and ``{+added+}``."""
    a, b = _WORD.findall(old), _WORD.findall(new)
    parts: list[str] = []
    for op, i1, i2, j1, j2 in FastMatcher(a, b).get_opcodes():
        if op == "equal":
            parts.append("".join(a[i1:i2]))
            continue
        gone, came = "".join(a[i1:i2]), "".join(b[j1:j2])
        tail = ""
        if op == "replace":  # "[-old-]{+new+} " rather than "[-old -]{+new +}"
            blank = len(gone) - len(gone.rstrip(" \t"))
            if blank and came.endswith(gone[-blank:]):
                tail, gone, came = gone[-blank:], gone[:-blank], came[:-blank]
        if gone:
            parts.append(_marked(gone, "[-", "-]"))
        if came:
            parts.append(_marked(came, "{+", "+}"))
        parts.append(tail)
    return "".join(parts)


def _marked(text: str, start: str, end: str) -> str:
    """Marks that never span a line break (each line's part is marked on its own, as git does)."""
    return "\n".join(start + piece + end if piece else "" for piece in text.split("\n"))


def _done(tasks: list[dict[str, Any]], side: str) -> str:
    present = [t for t in tasks if t[side] is not None]
    return f"{sum(1 for t in present if t[side] == 'completed')}/{len(present)}"


def _task_name(task: dict[str, Any]) -> str:
    return str(task["name"] or (task["id"] or "?")[:8])


def _cap(items: list[Line], max_items: int) -> list[Line]:
    if len(items) <= max_items:
        return items
    return items[:max_items] + [("meta", f"  ... and {len(items) - max_items} more")]


