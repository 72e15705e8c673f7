"""Store benchmarks.

``python benchmarks/bench_store.py`` (issue 3): commit every checkpoint of crew_json_star_n6 (CrewAI 1.15.30,
6 tasks, on_events=["*"]) in parent order into a new store, side by side with the JSON files CrewAI wrote.
Prints: JSON bytes, store bytes on disk before and after gc, the ratio, objects, and per-commit write time
(median, max, first vs last, and the median of the first and last five).

``python benchmarks/bench_store.py --growing [--steps 1000]`` (issue 13): a CrewAI-shaped document growing to
~1.4 MB over 1,000 commits (one event node per step, the previous node's edges and one task's state edited),
committed as the CrewAI writer gives it (event nodes :class:`crewckpt.Frozen`) and as plain JSON, against
writing the whole document to a file with orjson and against the floor: serialize + hash only each step's
delta (CPU) and one zstd stream of all deltas (bytes). CPU is thread CPU per commit.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from crewai_fixtures import FIXTURES  # noqa: E402  (vendored CrewAI fixtures)

from crewckpt import Store  # noqa: E402
from crewckpt.backends.sqlite import WAL_AUTOCHECKPOINT_PAGES  # noqa: E402
from crewckpt.views.document import CREWAI  # noqa: E402  (CrewAI documents: its summary and split hints)


def parent_order(folder: Path) -> list[Path]:
    """CrewAI files sorted so every parent comes before its children (file name: <id>_p-<parent>.json)."""
    by_id = {}
    for f in folder.glob("*.json"):
        cid, parent = f.stem.split("_p-")
        by_id[cid] = (parent, f)
    kids: dict[str, list[str]] = {}
    for cid, (parent, _) in by_id.items():
        kids.setdefault(parent if parent in by_id else "none", []).append(cid)
    order, stack = [], sorted(kids.get("none", []), reverse=True)
    while stack:
        c = stack.pop()
        order.append(by_id[c][1])
        stack.extend(sorted(kids.get(c, []), reverse=True))
    return order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixture", default="crew_json_star_n6")
    ap.add_argument("--growing", action="store_true", help="the growing-document benchmark (issue 13)")
    ap.add_argument("--steps", type=int, default=1000)
    args = ap.parse_args()
    if args.growing:
        from growing_doc import run_growing
        run_growing(args.steps)
        return
    files = parent_order(FIXTURES / args.fixture / "main")
    raws = [f.read_bytes() for f in files]
    json_bytes = sum(len(r) for r in raws)
    docs = [json.loads(r) for r in raws]
    with tempfile.TemporaryDirectory() as tmp:
        s = Store.init(Path(tmp) / ".ckpt", profile=CREWAI)  # as the CrewAI writer and `ckpt` open it
        times = []
        for f, d in zip(files, docs):
            t = time.perf_counter()
            s.commit(d, alias=f.stem.split("_p-")[0], trigger=d.get("trigger"))
            times.append(time.perf_counter() - t)
        before = s.stats()["file_bytes"]
        wal = Path(tmp, ".ckpt", "store.db-wal")
        wal_bytes = wal.stat().st_size if wal.exists() else 0
        db = sqlite3.connect(Path(tmp, ".ckpt", "store.db"))  # the WAL's bound, as the store sets it
        every = db.execute("PRAGMA page_size").fetchone()[0] * WAL_AUTOCHECKPOINT_PAGES
        db.close()
        t = time.perf_counter()
        s.gc()
        gc_s = time.perf_counter() - t
        st = s.stats()
        after = st["file_bytes"]
        assert all(s.read(f.stem.split("_p-")[0]) == d for f, d in zip(files, docs))
        ms = [x * 1000 for x in times]
        print(f"fixture               {args.fixture}: {len(files)} checkpoints")
        print(f"CrewAI JSON files     {json_bytes:>12,} bytes")
        print(f"crewckpt before gc    {before:>12,} bytes  ({json_bytes / before:.1f}x smaller; of which WAL "
              f"{wal_bytes:,}, checkpointed into the db every ~{every // 1024} KiB)")
        print(f"crewckpt after gc     {after:>12,} bytes  ({json_bytes / after:.1f}x smaller)  gc {gc_s:.2f} s")
        print(f"objects               {st['objects']:>12,}  (logical {st['logical_bytes']:,} bytes)")
        print(f"commit ms             median {statistics.median(ms):.2f}  max {max(ms):.2f}  "
              f"first {ms[0]:.2f}  last {ms[-1]:.2f}  (last/first {ms[-1] / ms[0]:.2f}x)")
        print(f"commit ms, 5 first    median {statistics.median(ms[:5]):.2f}   5 last median "
              f"{statistics.median(ms[-5:]):.2f}")
        print("all checkpoints read back exactly: yes")


if __name__ == "__main__":
    main()
