"""Worker processes for the multi-process store tests (run as a script; never imported by pytest)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

from crewckpt import Store


def doc_for(tag: str, i: int) -> dict[str, object]:
    """A document whose big part repeats across workers (so gc and writers fight over shared objects)."""
    return {"tag": tag, "i": i, "shared": [f"shared-{j} " * 40 for j in range(i % 5)],
            "events": {f"e{j}": {"n": j, "text": "event text " * 30} for j in range(i % 40)}}


def commit_loop(path: str, branch: str, n: int, ack: str, tag: str) -> None:
    s = Store.open(path)
    with open(ack, "a") as f:
        for i in range(n):
            d = doc_for(tag, i)
            cid = s.commit(d, branch=branch, run_id=f"{tag}")
            f.write(json.dumps([cid, hashlib.sha256(json.dumps(d).encode()).hexdigest()]) + "\n")
            f.flush()
            os.fsync(f.fileno())


def gc_loop(path: str, seconds: float) -> None:
    s = Store.open(path)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for b in list(s.branches()):
            s.prune(b, keep=3)
        s.gc()


def gc_forever(path: str) -> None:
    s = Store.open(path)
    print("ready", flush=True)
    while True:
        s.gc()


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "commit":
        commit_loop(args[0], args[1], int(args[2]), args[3], args[4])
    elif cmd == "gc":
        gc_loop(args[0], float(args[1]))
    elif cmd == "gc-forever":
        gc_forever(args[0])
