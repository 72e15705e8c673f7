"""Corruption injection: damage stored frames or the database file and check what fsck and reads say.

Shared by tests/test_reliability_corruption.py and scripts/reliability.py. The expected outcome of damaging
one object is computed independently of crewckpt's reader (a small decoder below) from the store as it was
before the damage:

* the objects that become unreadable (``damaged``): the object itself if its frame no longer yields its
  body, and, when that object is a pack, every object whose PACKED frame names it;
* fsck --full must report exactly ``damaged`` as broken, and for each live commit exactly the damaged
  objects it reaches without passing through another damaged one (fsck does not walk below a broken tree);
* ``read`` of a live commit that reaches a damaged object raises IntegrityError; every other live commit
  reads back exactly.
"""

from __future__ import annotations

import dataclasses
import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import zstandard

from crewckpt.errors import CkptError, IntegrityError
from crewckpt.format import objects as ob
from crewckpt.history.snapshot import links_in
from crewckpt.history.store import Store

PACK_KEY = 8


def build_store(path: Path, seed: int, gc: bool) -> dict[str, Any]:
    """A store with packed checkpoints on two branches, a CDC-chunked big string, a fork and pruned commits;
    collected (repacked) when ``gc``. Returns ``commit id -> document`` of the live commits."""
    rng = random.Random(seed)
    docs: dict[str, Any] = {}
    with Store.init(path) as s:
        for n in range(8):
            branch = "main" if n % 3 else "alt"
            doc = {"n": n, "entities": [{"tasks": [{"id": f"t{k}", "out": f"answer {k} " * (30 + n * k)}
                                                   for k in range(n + 1)]}],
                   "events": {f"e{k}": {"k": k, "p": "y" * (k * 20)} for k in range(n * 10)},
                   "rand": rng.randbytes(200 + 50 * n).hex()}
            if n == 5:
                doc["big"] = rng.randbytes(700_000).hex()  # 1.4 MB of text: a STRING_CHUNKS tree of blobs
            docs[s.commit(doc, branch=branch)] = doc
        fork = s.commit({"fork": True, "base": docs[next(iter(docs))]}, branch="fork",
                        parents=[next(iter(docs))])
        docs[fork] = {"fork": True, "base": docs[next(iter(docs))]}
        for cid in s.prune("main", keep=3):
            docs.pop(cid)
        if gc:
            s.gc()
    return docs


@dataclasses.dataclass
class Snapshot:
    """The undamaged store, read independently: frames, kinds, bodies, links, pack membership."""

    frames: dict[bytes, bytes]
    kinds: dict[bytes, int]
    bodies: dict[bytes, bytes]
    links: dict[bytes, list[bytes]]
    members: dict[bytes, list[bytes]]  # pack id -> member ids
    live: list[bytes]


def _uvarints(buf: bytes, pos: int, n: int) -> tuple[list[int], int] | None:
    out = []
    for _ in range(n):
        v = shift = 0
        while True:
            if pos >= len(buf) or shift > 63:
                return None
            b = buf[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        out.append(v)
    return out, pos


def decode_frame(frame: bytes, packs: dict[bytes, bytes]) -> bytes | None:
    """Body a frame stands for (``packs``: pack id -> body), or None when it does not decode."""
    if not frame:
        return None
    if frame[0] == 0:
        return frame[1:]
    if frame[0] == 1:
        try:
            return zstandard.ZstdDecompressor().decompress(frame[1:], max_output_size=1 << 30)
        except zstandard.ZstdError:
            return None
    if frame[0] == 3:
        parsed = _uvarints(frame, 1 + PACK_KEY, 2)
        if parsed is None or parsed[1] != len(frame):
            return None
        (off, ln), _ = parsed
        for pid, body in packs.items():
            if pid[:PACK_KEY] == frame[1:1 + PACK_KEY] and off + ln <= len(body):
                return body[off:off + ln]
        return None
    return None


def snapshot(path: Path) -> Snapshot:
    """Read every object of a closed store with plain sqlite3 and the decoder above."""
    conn = sqlite3.connect(path / "store.db")
    rows = conn.execute("SELECT oid, kind, frame FROM objects").fetchall()
    live = [bytes(r[0]) for r in conn.execute("SELECT id FROM commits")]
    conn.close()
    frames = {bytes(o): bytes(f) for o, _, f in rows}
    kinds = {bytes(o): k for o, k, _ in rows}
    packs = {o: decode_frame(f, {}) for o, f in frames.items() if kinds[o] == ob.PACK}
    assert all(b is not None for b in packs.values())
    bodies: dict[bytes, bytes] = {}
    members: dict[bytes, list[bytes]] = {p: [] for p in packs}
    for o, f in frames.items():
        body = decode_frame(f, packs)  # type: ignore[arg-type]
        assert body is not None and ob.object_id(kinds[o], body) == o
        bodies[o] = body
        if f[0] == 3:
            pid = next(p for p in packs if p[:PACK_KEY] == f[1:1 + PACK_KEY]
                       and ob.object_id(kinds[o], packs[p][_uvarints(f, 9, 2)[0][0]:][:len(body)]) == o)
            members[pid].append(o)
    links: dict[bytes, list[bytes]] = {}
    for o, k in kinds.items():
        if k == ob.TREE:
            links[o] = [ln.oid for ln in links_in(ob.decode_tree(bodies[o])[1])]
        elif k == ob.COMMIT:
            links[o] = [ob.Commit.decode(bodies[o]).tree.oid]
        else:
            links[o] = []
    return Snapshot(frames, kinds, bodies, links, members, live)


def damaged_after(snap: Snapshot, oid: bytes, new_frame: bytes, new_kind: int | None = None) -> set[bytes]:
    """Objects unreadable once ``oid``'s frame (and kind) are replaced."""
    kind = snap.kinds[oid] if new_kind is None else new_kind
    packs = {p: snap.bodies[p] for p in snap.members}
    if snap.kinds[oid] == ob.PACK:
        packs[oid] = b""  # members must not resolve through the damaged pack by accident
    body = decode_frame(new_frame, packs)
    if new_frame[:1] == b"\x03" and snap.kinds[oid] == ob.PACK:
        body = None  # a pack cannot itself be packed
    if body is not None and ob.object_id(kind, body) == oid:
        return set()
    out = {oid}
    if snap.kinds[oid] == ob.PACK:
        out.update(snap.members[oid])
    return out


def frontier(snap: Snapshot, cid: bytes, damaged: set[bytes]) -> set[bytes]:
    """Damaged objects reachable from ``cid`` without passing through another damaged object."""
    out, seen, stack = set(), set(), [cid]
    while stack:
        o = stack.pop()
        if o in seen:
            continue
        seen.add(o)
        if o in damaged:
            out.add(o)
            continue
        stack.extend(snap.links.get(o, ()))
    return out


def damage(rng: random.Random, frame: bytes) -> tuple[str, bytes]:
    """Flip one random bit, or truncate, or empty a frame."""
    r = rng.random()
    if r < 0.6 and frame:
        i = rng.randrange(len(frame))
        return f"flip byte {i}", frame[:i] + bytes([frame[i] ^ (1 << rng.randrange(8))]) + frame[i + 1:]
    if r < 0.95 and len(frame) > 1:
        n = rng.randrange(1, len(frame))
        return f"truncate to {n}", frame[:n]
    return "empty", b""


@dataclasses.dataclass
class CorruptionFigures:
    """Totals of a corruption run."""

    trials: int = 0
    damaged_objects: int = 0  # trials whose damage made something unreadable
    benign: int = 0  # damage that left every body intact (e.g. a zstd window-size bit)
    fsck_exact: int = 0  # trials where fsck's broken set and affected map were exactly as expected
    reads_refused: int = 0  # reads of affected commits that raised IntegrityError
    reads_exact: int = 0  # reads of unaffected commits that returned the exact document
    wrong_data: int = 0
    db_trials: int = 0
    db_detected: int = 0  # db-file damage seen by open, fsck or a read
    db_harmless: int = 0  # db-file damage that changed nothing readable (free pages, slack)
    problems: list[str] = dataclasses.field(default_factory=list)


def object_trial(base: Path, work: Path, docs: dict[str, Any], snap: Snapshot, rng: random.Random,
                 fig: CorruptionFigures, target: bytes | None = None, kind_damage: bool = False) -> None:
    """Damage one object of a copy of ``base`` and check fsck and reads against the expectation."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base, work)
    oid = target if target is not None else rng.choice(sorted(snap.frames))
    if kind_damage:
        new_kind = rng.choice([k for k in ob.KIND_NAMES if k != snap.kinds[oid]])
        what, frame = f"kind {snap.kinds[oid]} -> {new_kind}", snap.frames[oid]
    else:
        new_kind = None
        what, frame = damage(rng, snap.frames[oid])
    conn = sqlite3.connect(work / "store.db")
    conn.execute("UPDATE objects SET frame=?, kind=? WHERE oid=?",
                 (frame, new_kind if new_kind is not None else snap.kinds[oid], oid))
    conn.commit()
    conn.close()
    fig.trials += 1
    label = f"{ob.KIND_NAMES[snap.kinds[oid]].decode()} {oid.hex()[:12]} ({what})"
    damaged = damaged_after(snap, oid, frame, new_kind)
    if new_kind is not None:  # kind is part of the id: the object no longer verifies, packed or not
        damaged = {oid} | (set(snap.members[oid]) if snap.kinds[oid] == ob.PACK else set())
    if damaged:
        fig.damaged_objects += 1
    else:
        fig.benign += 1
    expected_affected = {c.hex(): sorted(x.hex() for x in frontier(snap, c, damaged)) for c in snap.live}
    expected_affected = {c: v for c, v in expected_affected.items() if v}
    with Store.open(work) as s:
        rep = s.fsck(full=True)
        got_broken = set(rep.broken)
        exp_broken = {x.hex() for x in damaged}
        if got_broken == exp_broken and rep.affected == expected_affected:
            fig.fsck_exact += 1
        else:
            fig.problems.append(f"{label}: fsck broken {sorted(x[:8] for x in got_broken)} expected "
                                f"{sorted(x[:8] for x in exp_broken)}; affected {len(rep.affected)} commits, "
                                f"expected {len(expected_affected)}")
    with Store.open(work) as s:  # fresh caches
        for cid, doc in docs.items():
            try:
                got = s.read(cid)
            except IntegrityError:
                if cid in expected_affected:
                    fig.reads_refused += 1
                else:
                    fig.problems.append(f"{label}: read of undamaged commit {cid[:12]} raised IntegrityError")
                continue
            except CkptError as e:
                fig.problems.append(f"{label}: read of {cid[:12]} raised {type(e).__name__}: {e}")
                continue
            except Exception as e:  # noqa: BLE001 - anything else is a bug
                fig.problems.append(f"{label}: read of {cid[:12]} raised {type(e).__name__}: {e}")
                continue
            if got != doc:
                fig.wrong_data += 1
                fig.problems.append(f"{label}: read of {cid[:12]} returned WRONG data")
            elif cid in expected_affected:
                fig.problems.append(f"{label}: read of affected commit {cid[:12]} succeeded")
            else:
                fig.reads_exact += 1


def db_trial(base: Path, work: Path, docs: dict[str, Any], rng: random.Random, fig: CorruptionFigures) -> None:
    """Flip bytes in, or truncate, the database file itself; nothing may come back wrong or raise a
    non-crewckpt exception."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(base, work)
    db = work / "store.db"
    data = bytearray(db.read_bytes())
    if rng.random() < 0.25:
        n = rng.randrange(0, len(data))
        what = f"truncate db to {n} of {len(data)} bytes"
        data = data[:n]
    else:
        k = rng.choice([1, 4, 64])
        start = rng.randrange(0, len(data) - k)
        what = f"flip {k} bytes at {start}"
        for i in range(start, start + k):
            data[i] ^= 0xFF
    db.write_bytes(bytes(data))
    fig.db_trials += 1
    detected = False
    try:
        with Store.open(work) as s:
            try:
                rep = s.fsck(full=True)
                detected |= not rep.ok
            except CkptError:
                detected = True
            for cid, doc in docs.items():
                try:
                    got = s.read(cid)
                except CkptError:
                    detected = True
                    continue
                if got != doc:
                    fig.wrong_data += 1
                    fig.problems.append(f"db {what}: read of {cid[:12]} returned WRONG data")
    except CkptError:
        detected = True
    except Exception as e:  # noqa: BLE001 - a raw sqlite3/Python error reaching the user
        detected = True
        fig.problems.append(f"db {what}: {type(e).__module__}.{type(e).__name__}: {e}")
    if detected:
        fig.db_detected += 1
    else:
        fig.db_harmless += 1


def corruption_run(work: Path, object_trials: int, db_trials: int, seed: int = 3) -> CorruptionFigures:
    """Random object damage on a per-checkpoint-packed store and on a gc-repacked one, then database-file
    damage; returns the figures."""
    rng = random.Random(seed)
    fig = CorruptionFigures()
    for gc in (False, True):
        base = work / f"base-{gc}"
        docs = build_store(base, seed, gc)
        snap = snapshot(base)
        for i in range(object_trials // 2):
            object_trial(base, work / "t", docs, snap, rng, fig, kind_damage=(i % 10 == 9))
        for _ in range(db_trials // 2):
            db_trial(base, work / "t", docs, rng, fig)
    return fig
