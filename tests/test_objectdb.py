"""ObjectDB reads while packs move (docs/backends.md RD4): a member's frame read before a merge names a pack the
merge dropped; the read goes again to the member's new frame, charges its budget once, and reports damage only
when the same frame names a missing pack twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crewckpt.backends.base import StoredObject
from crewckpt.errors import IntegrityError
from crewckpt.format import objects as ob
from crewckpt.history.limits import ReadBudget
from crewckpt.history.objectdb import ObjectDB
from crewckpt.history.store import Store


def doc(i: int) -> dict[str, Any]:
    """Each step adds a task (small objects: one pack per checkpoint)."""
    return {"tasks": [{"description": f"task {k} " + "lorem ipsum " * 200, "output": {"raw": f"answer {k} " * 300}}
                      for k in range(i + 1)]}


def _packed_members(s: Store) -> list[bytes]:
    return [m.oid for m in s.backend.iter_objects() if m.kind != ob.PACK and m.head[:1] == b"\x03"]


def test_a_read_whose_pack_a_merge_drops_meanwhile_reads_the_new_frame_and_charges_once(tmp_path: Path) -> None:
    with Store.init(tmp_path / "s") as w:
        for i in range(3):
            w.commit(doc(i))
        assert len(w._my_packs) >= 2
        loose = [m.oid for m in w.backend.iter_objects() if m.kind != ob.PACK and m.head[:1] != b"\x03"]
        assert loose
        members = loose[:1] + _packed_members(w)  # a loose one first: charged before the pack is found gone
        with Store.open(tmp_path / "s") as r:
            real = r.backend.get_many
            merged: list[bool] = []

            def get_many(oids: Any) -> dict[bytes, StoredObject]:
                got = real(oids)
                if not merged:
                    w.finish_writes()  # commits between this frame read and the pack read
                    merged.append(True)
                return got

            r.backend.get_many = get_many  # type: ignore[method-assign]
            spent = ReadBudget()
            got = ObjectDB(r.backend).get_many(members, budget=spent)
            assert merged and set(got) == set(members)
        with Store.open(tmp_path / "s") as clean:
            once = ReadBudget()
            assert ObjectDB(clean.backend).get_many(members, budget=once) == got
        assert spent.used_bytes == once.used_bytes  # the abandoned attempt's charge was given back


def test_a_frame_naming_a_pack_that_stays_missing_is_damage(tmp_path: Path) -> None:
    with Store.init(tmp_path / "s") as w:
        w.commit(doc(1))
        member = _packed_members(w)[0]
        pack = next(m.oid for m in w.backend.iter_objects() if m.kind == ob.PACK)
        w.backend.delete_objects([pack], 2**63 - 1)
        with pytest.raises(IntegrityError, match="which is not in the store"):
            ObjectDB(w.backend).get_many([member])


@pytest.mark.parametrize("full", [False, True])
def test_fsck_while_the_writer_merges_its_packs_reports_nothing_broken(tmp_path: Path, full: bool) -> None:
    """fsck reads frames itself (to name each broken object); a merge committing between its frame read and
    its pack read moved the objects, it did not lose them."""
    with Store.init(tmp_path / "s") as w:
        for i in range(3):
            w.commit(doc(i))
        assert len(w._my_packs) >= 2
        with Store.open(tmp_path / "s") as r:
            real = r.backend.get_many
            merged: list[bool] = []

            def get_many(oids: Any) -> dict[bytes, StoredObject]:
                got = real(oids)
                if not merged and any(s.kind == ob.TREE and s.frame[:1] == b"\x03" for s in got.values()):
                    w.finish_writes()
                    merged.append(True)
                return got

            r.backend.get_many = get_many  # type: ignore[method-assign]
            rep = r.fsck(full=full)
            assert merged
            assert rep.broken == {} and not rep.problems, rep
