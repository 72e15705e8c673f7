"""Write the format-1 fixture store ``tests/data/format1-store`` and its manifest ``format1-store.json``.

The fixture is "a format-1 store written by the previous release": it was produced by running this script
with crewckpt at commit 4e2366f (the last release writing commit format 1), and it is committed to git.
Rerunning it with a newer crewckpt writes that version's format instead, so never regenerate the committed
fixture; it exists so tests/test_format_migration.py can check that newer code opens it with every id
unchanged.

    python scripts/make_format1_store.py [OUT_DIR]     # default: tests/data

Content (deterministic: fixed times, run ids and documents, so the ids are reproducible):
  * ``main``: m1 -> m2 -> m3 -> m4 (m2 carries an alias and metadata; m3 holds a 20 KB string, so blobs
    and a STRING_CHUNKS tree; m4 a CrewAI-shaped document with entities, tasks and events);
  * ``feature``: forked from m2, f1 -> f2, then ``merge`` on main with parents [m4, f2];
  * ``prune(main, keep=4)`` removes m1 from the commit index; its object stays (no gc), so m1 is a commit
    reached only through objects (a pruned-but-present parent of m2).
The manifest records, per commit: id, the label above, the fields of the commit index row (or of the
object for the pruned one), liveness and the document.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from crewckpt.history.store import Store

T0 = 1_764_460_800_000_000_000  # 2025-11-30T00:00:00Z
MIN = 60 * 10**9


def _words(n: int) -> str:
    """A deterministic, mildly compressible text of about ``n`` characters."""
    out, x = [], 12345
    while sum(len(w) + 1 for w in out) < n:
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append("".join("abcdefghijklmnopqrstuvwxyz"[(x >> s) % 26] for s in range(0, 3 + x % 7)))
    return " ".join(out)


def _crew(done: int) -> dict[str, Any]:
    tasks = [{"description": f"task {i}", "output": {"raw": f"result {i}"} if i < done else None}
             for i in range(3)]
    return {
        "entities": [{"entity_type": "crew", "name": "fixture crew", "tasks": tasks,
                      "agents": [{"role": "researcher", "goal": "find things"}]}],
        "event_record": {"nodes": {f"ev{i}": {"type": "task_completed", "n": i} for i in range(done + 1)}},
    }


DOCS: dict[str, Any] = {
    "m1": {"step": 1, "note": "root commit", "values": [1, 2, 3]},
    "m2": {"step": 2, "note": "café ünïcode", "big": 2**70, "neg_zero": -0.0, "nested": {"a": {"b": [True, None]}}},
    "m3": {"step": 3, "text": _words(20_000), "list": list(range(200))},
    "m4": _crew(2),
    "f1": {"step": 3, "note": "feature work", "values": [1, 2, 3, 4]},
    "f2": _crew(1),
    "merge": _crew(3),
}


def build(out: Path) -> dict[str, Any]:
    """Write the store folder ``out/format1-store`` (replacing it) and return the manifest."""
    folder = out / "format1-store"
    shutil.rmtree(folder, ignore_errors=True)
    ids: dict[str, str] = {}
    with Store.init(folder, private=False) as s:
        def c(label: str, t: int, **kw: Any) -> None:
            ids[label] = s.commit(DOCS[label], time_ns=T0 + t * MIN, **kw)

        c("m1", 1, branch="main", run_id="run-main", trigger="crew_started")
        c("m2", 2, branch="main", run_id="run-main", trigger="task_completed", alias="crewai-ckpt-0002",
          meta={"source": "fixture", "attempt": 1})
        c("m3", 3, branch="main", run_id="run-main", trigger="task_completed")
        c("m4", 4, branch="main", run_id="run-main", trigger="task_completed")
        s.create_branch("feature", ids["m2"])
        c("f1", 5, branch="feature", run_id="run-feature", trigger="task_started")
        c("f2", 6, branch="feature", run_id="run-feature", trigger="task_completed")
        c("merge", 7, branch="main", parents=[ids["m4"], ids["f2"]], run_id="run-main", trigger=None,
          meta={"merged": "feature"})
        pruned = s.prune("main", keep=4)
        assert pruned == [ids["m1"]], pruned
        commits = []
        for label, cid in ids.items():
            info = s.info(cid)
            j = info.to_json()
            commits.append({"label": label, **{k: j[k] for k in (
                "id", "parents", "time_ns", "seq", "branch", "run_id", "trigger", "alias", "meta", "live",
                "summary")}, "doc": DOCS[label]})
        manifest = {
            "written_by": "crewckpt at commit 4e2366f (commit format 1), scripts/make_format1_store.py",
            "format_version": 1,
            "branches": s.branches(),
            "runs": s.runs(),
            "aliases": {"crewai-ckpt-0002": ids["m2"]},
            "pruned": [ids["m1"]],
            "log_main": [x.id for x in s.log("main")],
            "commits": commits,
        }
    for extra in ("gc.lock",):  # transient: the store recreates it on the first gc
        (folder / extra).unlink(missing_ok=True)
    (out / "format1-store.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    return manifest


if __name__ == "__main__":
    dest = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "tests" / "data"
    m = build(dest)
    print(f"wrote {dest / 'format1-store'}: {len(m['commits'])} commits, branches {sorted(m['branches'])}")
