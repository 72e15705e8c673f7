"""Corruption suite: damaged frames, packs and database files (issue 8, item 4).

fsck --full must name exactly the damaged objects and, per live commit, the damaged objects it needs; reads
of those commits raise IntegrityError; every other commit restores exactly; nothing ever returns wrong data
or raises a non-crewckpt exception. Expectations come from an independent decoder (corruption_harness).
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from corruption_harness import (
    CorruptionFigures,
    build_store,
    corruption_run,
    damaged_after,
    db_trial,
    frontier,
    object_trial,
    snapshot,
)

from crewckpt.errors import CkptError, IntegrityError
from crewckpt.format import objects as ob
from crewckpt.history.store import Store


@pytest.fixture(scope="module", params=[False, True], ids=["checkpoint-packs", "after-gc"])
def base(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Any, bool]:
    path = tmp_path_factory.mktemp("corrupt") / "base"
    docs = build_store(path, seed=11, gc=request.param)
    return path, docs, snapshot(path), request.param


def _no_problems(fig: CorruptionFigures) -> None:
    assert fig.problems == [], "\n".join(fig.problems[:10])
    assert fig.wrong_data == 0


def _set_frame(path: Path, oid: bytes, frame: bytes) -> None:
    conn = sqlite3.connect(path / "store.db")
    conn.execute("UPDATE objects SET frame=? WHERE oid=?", (frame, oid))
    conn.commit()
    conn.close()


def test_the_store_under_test_has_packed_and_loose_objects(base: tuple[Path, dict, Any, bool]) -> None:
    _, docs, snap, collected = base
    packs = [p for p in snap.members if snap.members[p]]
    assert packs, "expected packed objects"
    loose = [o for o, f in snap.frames.items() if f[0] != 3 and snap.kinds[o] != ob.PACK]
    # commits are stored loose until gc repacks every live object into big packs
    assert bool(loose) == (not collected)
    assert len(docs) >= 5


def test_damaging_a_pack_breaks_exactly_its_members(base: tuple[Path, dict, Any, bool], tmp_path: Path) -> None:
    path, docs, snap, _ = base
    pack = max((p for p in snap.members if snap.members[p]), key=lambda p: len(snap.members[p]))
    frame = snap.frames[pack]
    bad = frame[:len(frame) // 2]
    expected = damaged_after(snap, pack, bad)
    assert expected == {pack, *snap.members[pack]}
    fig = CorruptionFigures()
    object_trial(path, tmp_path / "t", docs, snap, random.Random(0), fig, target=pack)
    _no_problems(fig)
    assert fig.fsck_exact == 1
    # and the report names each member and which commits need it
    with Store.open(tmp_path / "t") as s:
        rep = s.fsck(full=True)
    assert set(rep.broken) == {x.hex() for x in expected}
    need = {c.hex() for c in snap.live if frontier(snap, c, expected)}
    assert set(rep.affected) == need and need


@pytest.mark.parametrize("kind", [ob.COMMIT, ob.TREE, ob.BLOB])
def test_damaging_one_object_of_each_kind(base: tuple[Path, dict, Any, bool], tmp_path: Path, kind: int) -> None:
    path, docs, snap, _ = base
    rng = random.Random(kind)
    fig = CorruptionFigures()
    for oid in rng.sample(sorted(o for o in snap.kinds if snap.kinds[o] == kind), 3):
        object_trial(path, tmp_path / "t", docs, snap, rng, fig, target=oid)
    _no_problems(fig)
    assert fig.fsck_exact == fig.trials == 3


def test_emptied_frame_is_reported_not_crashing(base: tuple[Path, dict, Any, bool], tmp_path: Path) -> None:
    """A zero-length frame (a lost write) once crashed iter_objects (substr of an empty blob is NULL)."""
    path, _docs, snap, _ = base
    shutil.copytree(path, tmp_path / "t")
    victim = next(c for c in snap.live)
    _set_frame(tmp_path / "t", victim, b"")
    with Store.open(tmp_path / "t") as s:
        rep = s.fsck(full=True)
        assert victim.hex() in rep.broken and victim.hex() in rep.affected
        with pytest.raises(IntegrityError):
            s.read(victim.hex())
        with pytest.raises(CkptError):
            s.gc()  # gc refuses to collect from a store whose live commits it cannot read


def test_packed_frame_naming_a_missing_pack_reads_as_integrity_error(base: tuple[Path, dict, Any, bool],
                                                                      tmp_path: Path) -> None:
    """A flipped bit in a packed frame's pack key used to surface as MissingObject of a made-up id."""
    path, _docs, snap, _ = base
    shutil.copytree(path, tmp_path / "t")
    member = next(o for o, f in snap.frames.items() if f[0] == 3 and snap.kinds[o] == ob.TREE)
    f = snap.frames[member]
    _set_frame(tmp_path / "t", member, f[:1] + bytes([f[1] ^ 0x40]) + f[2:])
    needing = [c for c in snap.live if frontier(snap, c, {member})]
    assert needing
    with Store.open(tmp_path / "t") as s:
        with pytest.raises(IntegrityError) as e:
            s.read(needing[0].hex())
        assert e.value.oid == member.hex()


def test_gc_on_a_damaged_store_deletes_nothing_a_live_commit_needs(base: tuple[Path, dict, Any, bool],
                                                                   tmp_path: Path) -> None:
    path, _docs, snap, _ = base
    shutil.copytree(path, tmp_path / "t")
    tree = next(o for o in snap.kinds if snap.kinds[o] == ob.TREE and snap.frames[o][0] != 3)  \
        if any(snap.kinds[o] == ob.TREE and snap.frames[o][0] != 3 for o in snap.kinds) else \
        next(o for o in snap.kinds if snap.kinds[o] == ob.TREE)
    _set_frame(tmp_path / "t", tree, snap.frames[tree][:-1] or b"\x07")
    with Store.open(tmp_path / "t") as s:
        try:
            s.gc()
        except CkptError:
            pass
    conn = sqlite3.connect(tmp_path / "t" / "store.db")
    left = {bytes(r[0]) for r in conn.execute("SELECT oid FROM objects")}
    conn.close()
    needed = set()
    stack = list(snap.live)
    while stack:
        o = stack.pop()
        if o not in needed:
            needed.add(o)
            stack.extend(snap.links.get(o, ()))
    assert needed <= left


def test_random_object_damage(tmp_path: Path) -> None:
    fig = corruption_run(tmp_path, object_trials=24, db_trials=0, seed=5)
    _no_problems(fig)
    assert fig.fsck_exact == fig.trials == 24
    assert fig.reads_refused > 0 and fig.reads_exact > 0


def test_database_file_damage_never_returns_wrong_data(tmp_path: Path) -> None:
    path = tmp_path / "base"
    docs = build_store(path, seed=2, gc=True)
    rng = random.Random(9)
    fig = CorruptionFigures()
    for _ in range(12):
        db_trial(path, tmp_path / "t", docs, rng, fig)
    _no_problems(fig)
    assert fig.db_detected > 0


def test_damaged_schema_text_is_a_corrupt_store_not_a_unicode_error(tmp_path: Path) -> None:
    """A flipped byte in sqlite_master made SQLite's own error message invalid UTF-8: Store.open raised a raw
    UnicodeDecodeError (found by the long db-file run of scripts/reliability.py)."""
    from crewckpt.errors import CorruptStore
    base = tmp_path / "base"
    build_store(base, seed=4, gc=False)
    data = (base / "store.db").read_bytes()
    start, end = data.index(b"CREATE TABLE"), data.rindex(b"CREATE ")
    t = tmp_path / "t"
    shutil.copytree(base, t)
    for off in range(start, end, 5):  # every 5th byte of the schema text
        d = bytearray(data)
        d[off] ^= 0xFF
        (t / "store.db").write_bytes(bytes(d))
        try:
            with Store.open(t) as s:
                s.fsck(full=True)
        except CkptError as e:
            assert isinstance(e, CorruptStore) and "\n" not in str(e)
