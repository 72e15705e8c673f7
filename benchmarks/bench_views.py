"""Bytes of each CrewAI fixture as CrewAI JSON, CrewAI SQLite, and imported into crewckpt (side by side).

For every fixture: the source's own bytes, then the same checkpoints exported by crewckpt as a CrewAI JSON
folder and as a CrewAI SQLite db (JSON text), and the crewckpt store they were imported into (objects'
stored bytes and the store folder on disk, SQLite overhead included); plus import/export wall times.

    python benchmarks/bench_views.py [--fixtures DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from crewckpt.history.store import Store
from crewckpt.views.exporter import export_crewai
from crewckpt.views.importer import import_crewai

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from crewai_fixtures import FIXTURES  # vendored CrewAI fixtures

CASES = ["crew_default/.checkpoints", "crew_json_star", "crew_json_star_n6", "crew_sqlite_star/cp.db",
         "crew_restore_src", "flow_json", "flow_dict_star", "agent_json"]


def folder_bytes(p: Path) -> int:
    if p.is_file():
        return sum(f.stat().st_size for f in p.parent.glob(p.name + "*"))  # db + -wal/-shm if any
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def json_text_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*.json"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", type=Path, default=FIXTURES)
    args = ap.parse_args()
    head = (f"{'fixture':<26}{'ckpts':>6}{'source':>11}{'as JSON':>11}{'as SQLite':>11}{'crewckpt':>10}"
            f"{'(disk)':>10}{'JSON/ckpt':>10}{'import s':>9}{'export s':>9}")
    print(head)
    print("-" * len(head))
    totals = [0, 0, 0, 0]
    with tempfile.TemporaryDirectory(prefix="bench-views-") as tmp:
        for case in CASES:
            src = args.fixtures / case
            work = Path(tmp) / case.replace("/", "_")
            work.mkdir()
            store = Store.init(work / ".ckpt")
            t0 = time.perf_counter()
            report = import_crewai(store, src, progress=False)
            t_import = time.perf_counter() - t0
            t0 = time.perf_counter()
            export_crewai(store, work / "json", "json")
            export_crewai(store, work / "view.db", "sqlite")
            t_export = time.perf_counter() - t0
            stats = store.stats()
            store.close()
            sqlite3.connect(work / "view.db").execute("VACUUM").connection.close()
            as_json, as_sqlite = json_text_bytes(work / "json"), folder_bytes(work / "view.db")
            stored, disk = stats["stored_bytes"], folder_bytes(work / ".ckpt")
            for i, v in enumerate((as_json, as_sqlite, stored, disk)):
                totals[i] += v
            print(f"{case:<26}{len(report.imported):>6}{folder_bytes(src):>11,}{as_json:>11,}{as_sqlite:>11,}"
                  f"{stored:>10,}{disk:>10,}{as_json / stored:>9.1f}x{t_import:>9.2f}{t_export:>9.2f}")
            shutil.rmtree(work)
    print("-" * len(head))
    print(f"{'total':<26}{'':>6}{'':>11}{totals[0]:>11,}{totals[1]:>11,}{totals[2]:>10,}{totals[3]:>10,}"
          f"{totals[0] / totals[2]:>9.1f}x")
    print("source: the fixture as CrewAI wrote it (cp.db holds JSONB); as JSON / as SQLite: crewckpt's export of "
          "the imported checkpoints; crewckpt: stored object bytes; (disk): the .ckpt folder.")


if __name__ == "__main__":
    main()
