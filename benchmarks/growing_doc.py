"""The growing-document store benchmark (issue 13; run through ``bench_store.py --growing``).

A CrewAI-shaped checkpoint document (one crew entity with tasks and agents, an event record) grows by one
event node (~1.3 KB) per step to ~1.4 MB after 1,000 steps. Each step also edits what CrewAI edits: the
previous node's ``next`` edge, the open task-started node's ``child`` edges, the running task's state (and
its output when it finishes), an agent's counter. Compared per commit (thread CPU):

* crewckpt, the document as the CrewAI writer gives it: the event nodes are an
  :class:`~crewckpt.history.snapshot.AppendMap` of :class:`crewckpt.Frozen` nodes (a node whose edges changed
  is a new Frozen), each task a :class:`crewckpt.Frozen` (a task that changed is a new one, as
  ``crewckpt.crewai.entities.CrewDumper`` gives them), the rest plain JSON;
* crewckpt, the same document as plain JSON (no hints);
* orjson: the whole document dumped and written to one file (overwritten every step);
* the floor: only the step's delta serialized (orjson) and hashed (blake3); bytes: one zstd stream (level 3)
  of every delta.
"""

from __future__ import annotations

import os
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import blake3
import orjson
import zstandard

from crewckpt import Frozen, Store
from crewckpt.backends import sqlite as sq
from crewckpt.format.objects import PACK
from crewckpt.history.snapshot import AppendMap, Parts
from crewckpt.views.document import CREWAI

_WORDS = [blake3.blake3(str(k).encode()).hexdigest()[:3 + k % 6] for k in range(2000)]  # a 2,000-word vocabulary
TASK_EVERY = 6  # events per task, as CrewAI's "*" gives per task


def _event(i: int, task: int) -> dict[str, Any]:
    return {
        "event_id": f"ev-{i:06d}-{blake3.blake3(str(i).encode()).hexdigest()[:24]}",
        "timestamp": f"2026-12-01T14:{(i // 60) % 60:02d}:{i % 60:02d}.{i:06d}",
        "type": ("task_started", "agent_execution_started", "agent_logs_started", "agent_logs_execution",
                 "agent_execution_completed", "task_completed")[i % TASK_EVERY],
        "source_fingerprint": blake3.blake3(f"src{task}".encode()).hexdigest()[:36],
        "source_type": "task", "task_id": f"task-{task}", "task_name": f"task{task}",
        "agent_role": ("Researcher", "Writer", "Reviewer")[task % 3],
        "emission_sequence": i,
        "message": f"Step {task} event {i}: " + " ".join(random.Random(i).choices(_WORDS, k=150)),
    }


class Growing:
    """The document and its per-step edits; ``frozen``: event nodes as Frozen values."""

    def __init__(self, frozen: bool, n_tasks: int) -> None:
        self.frozen = frozen
        self.nodes: dict[str, Any] = {}
        self.order: list[str] = []
        self.tasks = [{"name": f"task{k}", "description": f"Step {k}: do part {k}.", "status": "pending",
                       "expected_output": f"A short paragraph for step {k}.", "output": None,
                       "agent": {"role": ("Researcher", "Writer", "Reviewer")[k % 3], "calls": 0}}
                      for k in range(n_tasks)]
        self.agents = [{"role": r, "goal": f"Do the {r}'s part well", "iterations": 0}
                       for r in ("Researcher", "Writer", "Reviewer")]
        self.ftasks = [self._freeze(t) for t in self.tasks]  # the tasks as the CrewAI writer gives them
        self.doc = {"crewai_version": "1.15.30", "parent_id": None, "branch": "main",
                    "entities": [{"entity_type": "crew", "name": "crew",
                                  "tasks": self.ftasks if frozen else self.tasks,
                                  "agents": self.agents}],
                    "event_record": {"nodes": self.nodes}, "trigger": None}
        self.open_parent: str | None = None
        self.log = AppendMap()

    @staticmethod
    def _freeze(value: Any) -> Frozen:
        data = orjson.dumps(value)
        return Frozen(orjson.loads(data), data)  # a copy: the live task goes on changing

    def _set_node(self, eid: str, node: dict[str, Any]) -> None:
        self.nodes[eid] = node
        if self.frozen:
            self.log.set(eid, Frozen(node, orjson.dumps(node)))

    def _node(self, eid: str) -> dict[str, Any]:
        return self.nodes[eid]  # type: ignore[no-any-return]

    def step(self, i: int) -> list[Any]:
        """Apply step ``i``; returns its delta (what changed, as ``[path, value]`` pairs)."""
        task = i // TASK_EVERY
        ev = _event(i, task)
        eid = ev["event_id"]
        edges: dict[str, list[str]] = {}
        delta: list[Any] = []
        if self.order:
            prev = self.order[-1]
            edges["previous"] = [prev]
            p = self._node(prev)
            pe = {k: list(v) for k, v in p["edges"].items()}
            pe.setdefault("next", []).append(eid)
            self._set_node(prev, {"event": p["event"], "edges": pe})
            delta.append([f"nodes.{prev}.edges.next", eid])
        if self.open_parent is not None and i % TASK_EVERY:
            edges["parent"] = [self.open_parent]
            p = self._node(self.open_parent)
            pe = {k: list(v) for k, v in p["edges"].items()}
            pe.setdefault("child", []).append(eid)
            self._set_node(self.open_parent, {"event": p["event"], "edges": pe})
            delta.append([f"nodes.{self.open_parent}.edges.child", eid])
        if i % TASK_EVERY == 0:
            self.open_parent = eid
        self._set_node(eid, {"event": ev, "edges": edges})
        self.order.append(eid)
        delta.append([f"nodes.{eid}", self._node(eid)])
        t = self.tasks[task % len(self.tasks)]
        t["status"] = ev["type"]
        t["agent"]["calls"] += 1
        delta.append([f"tasks.{task}.status", t["status"]])
        if i % TASK_EVERY == TASK_EVERY - 1:
            t["output"] = {"raw": f"Result of step {task}: " + " ".join(random.Random(-task).choices(_WORDS, k=80)), "agent": t["agent"]["role"]}
            delta.append([f"tasks.{task}.output", t["output"]])
        if self.frozen:
            self.ftasks[task % len(self.tasks)] = self._freeze(t)
        self.agents[task % 3]["iterations"] += 1
        self.doc["trigger"] = ev["type"]
        self.doc["parent_id"] = f"c{i}"
        delta.append(["agents.iterations", self.agents[task % 3]["iterations"]])
        if self.frozen:
            self.doc["event_record"] = {"nodes": self.log.parts()}
        return delta


def _plain(doc: dict[str, Any]) -> Any:
    return orjson.loads(orjson.dumps(doc, default=lambda v: v.plain() if isinstance(v, Parts) else v.value))


def _folder_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def _breakdown(folder: Path) -> dict[str, int]:
    """Bytes of a closed SQLite store by what they hold (SQLite's ``dbstat``: pages of each table and index)."""
    db = sqlite3.connect(folder / "store.db")
    try:
        pages = dict(db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name").fetchall())
        packs = db.execute("SELECT coalesce(sum(length(frame)), 0) FROM objects WHERE kind = ?",
                           (PACK,)).fetchone()[0]
        n_rows = db.execute("SELECT count(*) FROM objects").fetchone()[0]
        n_objects = db.execute("SELECT count(*) FROM objects WHERE kind != ?", (PACK,)).fetchone()[0]
    finally:
        db.close()
    history = sum(v for k, v in pages.items() if k.startswith(("commits", "reflog", "refs", "aliases")))
    return {"packs": packs, "objects_table": pages.get("objects", 0), "object_rows": n_rows, "objects": n_objects,
            "history": history, "other": sum(pages.values()) - pages.get("objects", 0) - history}


def _bare_transactions(n_objects: int, per_commit: int, commits: int = 300) -> list[float]:
    """Thread CPU (ms) of durable SQLite transactions writing only the rows one checkpoint writes
    (``per_commit`` object rows with random 32-byte ids and a pointer-sized frame, the commit row, the
    branch ref, two reflog records, the counter) into crewckpt's schema, pragmas and page size, on an
    objects table already holding ``n_objects`` rows: SQLite's own cost of a commit's rows, no crewckpt code."""
    with tempfile.TemporaryDirectory(prefix="bench-bare-") as tmp:
        db = sqlite3.connect(Path(tmp, "bare.db"), isolation_level=None)
        db.execute(f"PRAGMA page_size={sq.PAGE_SIZE}")
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(f"PRAGMA wal_autocheckpoint={sq.WAL_AUTOCHECKPOINT_PAGES}")
        db.executescript(sq._SCHEMA)
        db.execute("INSERT INTO meta VALUES ('seq', '0')")
        db.executemany("INSERT INTO objects VALUES (?, 2, 300, 0, ?)",
                       [(os.urandom(32), os.urandom(14)) for _ in range(n_objects)])
        prev, times = os.urandom(32), []
        for i in range(commits):
            rows = [(os.urandom(32), 2, 300, i, os.urandom(14)) for _ in range(per_commit)]
            cid = os.urandom(32)
            t = time.thread_time()
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT OR IGNORE INTO objects VALUES (?, ?, ?, ?, ?)", rows)
            db.execute("INSERT INTO commits VALUES (?, 'main', ?, ?, 'run', 'task_completed', ?, ?, ?, NULL, NULL)",
                       (cid, i, i, prev, rows[0][0], os.urandom(24)))
            db.execute("INSERT OR REPLACE INTO refs VALUES ('refs/heads/main', ?)", (cid,))
            for ref in ("refs/heads/main", "HEAD"):
                db.execute("INSERT INTO reflog(ref, old, new, time_ns, message) VALUES (?, ?, ?, ?, 'commit')",
                           (ref, prev, cid, i))
            db.execute("UPDATE meta SET value = ? WHERE key = 'seq'", (str(i),))
            db.execute("COMMIT")
            times.append((time.thread_time() - t) * 1000)
            prev = cid
        db.close()
    return times


def _phases(steps: int) -> dict[str, list[float]]:
    """Thread CPU (ms) per commit of each stage of ``Store.commit`` on the Frozen-nodes document, from timers
    wrapped around the stages for this run only: the split (walk, encode, BLAKE3), the pack (zstd), the
    summary, and the transaction (every SQL statement, the commit object, COMMIT); "other" is the rest."""
    from crewckpt.history import snapshot, store

    stages = {"split": (snapshot.Splitter, "split"), "pack": (Store, "_frames"), "summary": (store, "_summary"),
              "transaction": (Store, "_land")}
    spent = dict.fromkeys(stages, 0.0)
    saved = {name: getattr(owner, attr) for name, (owner, attr) in stages.items()}

    def timed(name: str, fn: Any) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            t = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.thread_time() - t
        return run

    out: dict[str, list[float]] = {name: [] for name in [*stages, "other"]}
    try:
        for name, (owner, attr) in stages.items():
            setattr(owner, attr, timed(name, saved[name]))
        with tempfile.TemporaryDirectory(prefix="bench-phases-") as tmp:
            g = Growing(True, steps // TASK_EVERY + 1)
            s = Store.init(Path(tmp, "s"), profile=CREWAI)
            for i in range(steps):
                g.step(i)
                for name in spent:
                    spent[name] = 0.0
                t = time.thread_time()
                s.commit(g.doc, trigger=g.doc["trigger"])
                total = time.thread_time() - t
                for name in stages:
                    out[name].append(spent[name] * 1000)
                out["other"].append((total - sum(spent.values())) * 1000)
            s.close()
    finally:
        for name, (owner, attr) in stages.items():
            setattr(owner, attr, saved[name])
    return out


def _stats(name: str, ms: list[float], ref: float | None = None) -> str:
    k = max(len(ms) // 10, 1)
    first, last = statistics.mean(ms[:100] if len(ms) >= 200 else ms[:k]), statistics.mean(
        ms[-100:] if len(ms) >= 200 else ms[-k:])
    rel = f"  {statistics.median(ms) / ref:.2f}x orjson" if ref else ""
    return (f"{name:<28} median {statistics.median(ms):7.3f} ms  first 100 {first:7.3f}  last 100 {last:7.3f}  "
            f"(last/first {last / first:.2f}x){rel}")


def run_growing(steps: int = 1000) -> dict[str, Any]:
    """Run the benchmark and print its table; returns the figures."""
    n_tasks = steps // TASK_EVERY + 1
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-growing-") as tmp:
        # orjson to a file, and the delta floor
        g = Growing(False, n_tasks)
        path = Path(tmp, "doc.json")
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        t_json, t_floor, deltas = [], [], []
        zc = zstandard.ZstdCompressor(level=3).compressobj()
        zbytes = 0
        for i in range(steps):
            delta = g.step(i)
            t = time.thread_time()
            data = orjson.dumps(g.doc)
            os.lseek(fd, 0, 0)
            os.write(fd, data)
            os.ftruncate(fd, len(data))
            t_json.append((time.thread_time() - t) * 1000)
            t = time.thread_time()
            d = orjson.dumps(delta)
            blake3.blake3(d).digest()
            t_floor.append((time.thread_time() - t) * 1000)
            deltas.append(d)
            zbytes += len(zc.compress(d + b"\n"))
        os.close(fd)
        zbytes += len(zc.flush())
        final_bytes = len(data)
        out["doc_bytes"] = final_bytes
        out["floor_bytes"] = zbytes
        for frozen in (True, False):
            g = Growing(frozen, n_tasks)
            folder = Path(tmp, f"store-{frozen}")
            s = Store.init(folder, profile=CREWAI)
            times, ids = [], []
            for i in range(steps):
                g.step(i)
                t = time.thread_time()
                ids.append(s.commit(g.doc, trigger=g.doc["trigger"]))
                times.append((time.thread_time() - t) * 1000)
            alive = _folder_bytes(folder)
            assert s.read(ids[-1]) == _plain(g.doc)
            same = []  # the last document committed again unchanged (the whole-document fast path, plain JSON)
            for _ in range(20):
                t = time.thread_time()
                s.commit(g.doc, trigger=g.doc["trigger"])
                same.append((time.thread_time() - t) * 1000)
            s.close()
            after = _folder_bytes(folder)
            parts = _breakdown(folder)
            with Store.open(folder, profile=CREWAI) as s:  # what the layout gives at its best: one repack
                s.gc()
            gced = _folder_bytes(folder)
            out["frozen" if frozen else "plain"] = {"ms": times, "alive": alive, "after": after, "same": same,
                                                    "parts": parts, "gc": gced, "gc_parts": _breakdown(folder)}
        ref = statistics.median(t_json)
        print(f"growing document: {steps} commits, final document {final_bytes:,} bytes")
        print(_stats("orjson whole doc to a file", t_json))
        print(_stats("floor (delta dump + hash)", t_floor, ref))
        for key, name in (("frozen", "crewckpt (Frozen nodes)"), ("plain", "crewckpt (plain JSON)")):
            r = out[key]
            print(_stats(name, r["ms"], ref) + f"  store {r['alive']:,} B alive, {r['after']:,} B closed "
                  f"({r['after'] / zbytes:.2f}x floor)")
        for key, name in (("frozen", "Frozen nodes"), ("plain", "plain JSON")):
            print(f"the last document again, unchanged ({name}): median {statistics.median(out[key]['same']):.3f} ms "
                  f"({statistics.median(out[key]['same']) / statistics.mean(t_json[-20:]):.2f}x orjson of that "
                  f"document)")
        print(f"delta floor (one zstd-3 stream of the deltas) {zbytes:,} bytes; orjson writes "
              f"{sum(len(x) for x in deltas):,} delta bytes")
        for when, key in (("after close", "parts"), ("after gc", "gc_parts")):
            b = out["frozen"][key]
            print(f"store bytes {when} (Frozen nodes): packs {b['packs']:,} B ({b['packs'] / zbytes:.2f}x floor), "
                  f"objects table {b['objects_table']:,} B for {b['object_rows']:,} rows, history (commits, "
                  f"reflog, refs, their indexes) {b['history']:,} B ({b['history'] / steps:.0f} B per commit), "
                  f"other {b['other']:,} B; folder {out['frozen']['gc' if key == 'gc_parts' else 'after']:,} B")
        b = out["frozen"]["parts"]
        per = b["objects"] / steps
        ids = 64 * b["objects"] + 32 * steps
        bare = statistics.median(_bare_transactions(b["objects"], round(per)))
        out["bare_ms"], out["id_bytes"] = bare, ids
        print(f"SQLite alone: a durable transaction of one checkpoint's rows ({round(per)} object rows, commit, ref, "
              f"2 reflog, counter) on tables of this size, median {bare:.3f} ms = {bare / ref:.2f}x orjson (the "
              f"rest of a commit is crewckpt's: split, pack, summary, and the pages its layout dirties)")
        print(f"content addressing (Frozen nodes): {b['objects']:,} objects, {per:.1f} per commit, each a 32-byte id "
              f"held at least twice (its key, its parent's link) plus each commit's id in the reflog: >= {ids:,} B "
              f"of hashes = {ids / zbytes:.2f}x the floor before any content; with the content at the floor, "
              f"1.5x needs <= {(0.5 * zbytes / steps - 32) / 64:.1f} objects per commit")
        phases = _phases(steps)
        out["phases"] = {k: statistics.median(v) for k, v in phases.items()}
        print("where a commit goes (Frozen nodes, medians, timers on): " + ", ".join(
            f"{k} {v:.3f} ms ({v / ref:.2f}x)" for k, v in out["phases"].items()) + "; 0.5x orjson is "
            f"{0.5 * ref:.3f} ms")
        fz = out["frozen"]["ms"]
        print(f"Done-when: median {statistics.median(fz) / ref:.2f}x orjson (<= 0.5x); last/first 100 "
              f"{statistics.mean(fz[-100:]) / statistics.mean(fz[:100]):.2f}x (<= 1.3x); store after close "
              f"{out['frozen']['after'] / zbytes:.2f}x the floor (<= 1.5x)")
    return out
