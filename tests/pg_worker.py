"""Worker processes for the PostgreSQL fleet tests (run as a script; never imported by pytest).

    python pg_worker.py commit URL BRANCH N ACKFILE TAG   # N checkpoints; one JSON line per acknowledged one
    python pg_worker.py gc URL SECONDS TAG...             # garbage sharing the TAGs' objects + gc, in a loop
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

from crewckpt.backends.postgres import PgBackend
from crewckpt.history.store import Store


def open_store(url: str, **kw: float) -> Store:
    """The store at ``url`` (a postgresql:// location)."""
    return Store(PgBackend.open(url, **kw), None)


def doc_for(tag: str, i: int) -> dict[str, object]:
    """A document whose big part repeats across workers (so gc and writers fight over shared objects)."""
    return {"tag": tag, "i": i, "shared": [f"shared-{j} " * 40 for j in range(i % 5)],
            "events": {f"e{j}": {"n": j, "text": "event text " * 30} for j in range(i % 12)}}


def digest(doc: object) -> str:
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()


def commit_loop(url: str, branch: str, n: int, ack: str, tag: str) -> None:
    s = open_store(url)
    with open(ack, "a") as f:
        for i in range(n):
            d = doc_for(tag, i)
            cid = s.commit(d, branch=branch, run_id=tag)
            f.write(json.dumps([cid, digest(d), branch]) + "\n")
            f.flush()
            os.fsync(f.fileno())
    s.close()


def gc_loop(url: str, seconds: float, tags: list[str]) -> None:
    """gc in a loop; before each, make garbage that shares objects with what the writers are writing: the
    same documents committed on a branch "junk" and pruned right away (gc must not delete what a writer
    reuses meanwhile). No grace: every writer runs on this machine's clock, so only the locks protect them."""
    s = open_store(url, gc_grace_s=0.0)
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end:
        for tag in tags:
            s.commit(doc_for(tag, i), branch="junk", run_id="junk")
        s.prune("junk", keep=1)
        s.gc()
        i += 1
    s.close()


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "commit":
        commit_loop(args[0], args[1], int(args[2]), args[3], args[4])
    elif cmd == "gc":
        gc_loop(args[0], float(args[1]), args[2:])
    else:
        raise SystemExit(f"unknown command {cmd!r}")
