"""The worked examples in objects_format.md, recomputed byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

from crewckpt.format import objects as ob
from crewckpt.format.frame import Codec
from crewckpt.history.snapshot import Splitter

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


def test_example_commit() -> None:
    ex = _example(3)
    tree_id, _ = _example_tree()
    c = ob.Commit(ob.Link(tree_id, ob.TREE), (), 1764460800000000000, 1, "main", "run-1", "task_completed",
                  ob.Summary((("crew", "demo"),), 1, 2, 3, 4))
    assert c.encode().hex() == ex["body"]
    assert ob.object_id(ob.COMMIT, c.encode()).hex() == ex["id"]
    assert ob.Commit.decode(bytes.fromhex(ex["body"])) == c
