"""The worked examples in objects_format.md, recomputed byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

from crewckpt.format import objects as ob
from crewckpt.format.frame import Codec
from crewckpt.history.snapshot import Splitter
from crewckpt.history.store import Store

SPEC = (Path(__file__).resolve().parents[1] / "objects_format.md").read_text()


def _example(n: int) -> dict[str, str]:
    block = SPEC.split(f"### Example {n}:")[1].split("### Example")[0]
    return {k: v for k, v in re.findall(r"^- (\w+): `?([^`\n]+)`?", block, re.M)}


def test_example_blob() -> None:
    ex = _example(1)
    body = bytes.fromhex(ex["body"])
    assert body == b"hello"
    assert ob.object_id(ob.BLOB, body).hex() == ex["id"]
    assert Codec().encode(body).hex() == ex["frame"]


def _example_tree() -> tuple[bytes, bytes]:
    objs: dict[bytes, bytes] = {}

    def put(kind: int, body: bytes) -> bytes:
        oid = ob.object_id(kind, body)
        objs[oid] = body
        return oid

    root = Splitter().split({"a": 1, "b": [True, None, -0.0], "c": "\ud800", "d": 2**70}, put)
    return root.oid, objs[root.oid]


def test_example_tree() -> None:
    ex = _example(2)
    oid, body = _example_tree()
    assert body.hex() == ex["body"]
    assert oid.hex() == ex["id"]
    form, payload = ob.decode_tree(body)
    assert form == ob.OBJECT and payload["d"] == 2**70 and payload["c"] == "\ud800"


def test_example_commit_format_1() -> None:
    """Example 3: a format-1 commit still decodes, and re-encodes to the same body and id."""
    ex = _example(3)
    tree_id, _ = _example_tree()
    c = ob.Commit(ob.Link(tree_id, ob.TREE), (), 1764460800000000000, "run-1", "task_completed", version=1,
                  v1_seq=1, v1_branch="main", v1_summary=ob.V1Summary((("crew", "demo"),), 1, 2, 3, 4))
    assert c.encode().hex() == ex["body"]
    assert ob.object_id(ob.COMMIT, c.encode()).hex() == ex["id"]
    assert ob.Commit.decode(bytes.fromhex(ex["body"])) == c


def test_example_commit_format_2() -> None:
    """Example 4: a format-2 commit (no seq, branch or summary), child of example 3."""
    ex = _example(4)
    tree_id, _ = _example_tree()
    parent = bytes.fromhex(_example(3)["id"])
    c = ob.Commit(ob.Link(tree_id, ob.TREE), (parent,), 1764460860000000000, "run-1", "task_completed",
                  '{"attempt":2}', "ckpt-2")
    assert c.version == ob.COMMIT_FORMAT == 2
    assert c.encode().hex() == ex["body"]
    assert ob.object_id(ob.COMMIT, c.encode()).hex() == ex["id"]
    assert ob.Commit.decode(bytes.fromhex(ex["body"])) == c


def test_a_store_writes_the_example_commit_byte_for_byte() -> None:
    """The reference writer produces example 4 from the document of example 2 (so Store.commit writes
    exactly the documented layout, not just the encoder)."""
    ex = _example(4)
    s = Store.memory()
    parent = _example(3)["id"]
    with s.backend.transaction() as txn:  # example 3 is a format-1 commit: put its body as a v1 writer did
        txn.put_many([s.objects.frame(ob.COMMIT, bytes.fromhex(_example(3)["body"]))], 1)
    cid = s.commit({"a": 1, "b": [True, None, -0.0], "c": "\ud800", "d": 2**70}, branch="elsewhere",
                   parents=[parent], run_id="run-1", trigger="task_completed", time_ns=1764460860000000000,
                   meta={"attempt": 2}, alias="ckpt-2")
    assert cid == ex["id"]
    assert s.objects.get(bytes.fromhex(cid)) == (ob.COMMIT, bytes.fromhex(ex["body"]))
