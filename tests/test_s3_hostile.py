"""Objects another party put under an S3 store's prefix (real SeaweedFS): a damaged gc record, pack index or
gc lease is one line naming the object and the way out, never an unexpected exception, and the lease
message says how to break a lease no gc holds (attacker findings)."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import msgpack
import pytest

from crewckpt import Store
from crewckpt.errors import CkptError, GcBusy

pytestmark = pytest.mark.s3


def _plant(url: str, key: str, body: bytes) -> str:
    """PUT ``body`` at ``key`` under the store's prefix; returns the object's full key."""
    import s3_server as s3s

    u = urlsplit(url)
    full = f"{u.path.strip('/')}/{key}"
    s3s.client(parse_qs(u.query)["endpoint"][0]).put_object(Bucket=u.netloc, Key=full, Body=body)
    return full


def _store(url: str) -> None:
    s = Store.init(url)
    s.commit({"x": 1}, branch="main")
    s.close()


def _one_line(url: str) -> str:
    with pytest.raises(CkptError) as e, Store.open(url) as s:
        s.read("main")
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


@pytest.mark.parametrize("body", [b"\xc1", msgpack.packb(5), msgpack.packb([1]), msgpack.packb({"packs": 7}),
                                  msgpack.packb([1, [b"short"]])], ids=["not-msgpack", "int", "short-list",
                                                                        "packs-not-list", "bad-id"])
def test_a_damaged_gc_record_is_one_line_naming_it(s3_url: str, body: bytes) -> None:
    _store(s3_url)
    key = _plant(s3_url, "dead/00000000000000000001-evil", body)
    msg = _one_line(s3_url)
    assert key in msg and "is not a gc record crewckpt wrote" in msg and "delete that object" in msg, msg


@pytest.mark.parametrize("body", [b"\x01", b"\0\0\0\x05abcde", b"\0\0\0\x03" + msgpack.packb([1, [[b"x"]]])[:3],
                                  b"\0\0\0\x0b" + msgpack.packb(["t", [[1, 2, 3, 4, 5]]])],
                         ids=["short", "trailing", "truncated", "bad-entry"])
def test_a_damaged_pack_index_is_one_line_naming_the_pack(s3_url: str, body: bytes) -> None:
    _store(s3_url)
    key = _plant(s3_url, "packs/00000000000000000001-evil", body)
    msg = _one_line(s3_url)
    assert key in msg and "damaged index" in msg and "ckpt fsck" in msg, msg


def _gc(url: str) -> str:
    from click.testing import CliRunner

    from crewckpt.cli.main import cli
    r = CliRunner().invoke(cli, ["--store", url, "gc"])
    assert r.exit_code != 0, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "unexpected" not in lines[0], r.output
    return lines[0]


@pytest.mark.parametrize("body", [b"not json", b"[1]", json.dumps({"owner": "x", "held": True,
                                                                    "expires_ns": 1e23}).encode()],
                         ids=["not-json", "list", "float-expiry"])
def test_a_lease_crewckpt_did_not_write_is_one_line_saying_how_to_break_it(s3_url: str, body: bytes) -> None:
    _store(s3_url)
    key = _plant(s3_url, "locks/gc", body)
    line = _gc(s3_url)
    assert key in line and "not one crewckpt wrote" in line and "delete it" in line, line


def test_a_lease_held_far_into_the_future_names_the_object_to_delete(s3_url: str) -> None:
    _store(s3_url)
    key = _plant(s3_url, "locks/gc", json.dumps({"owner": "mallory", "held": True,
                                                 "expires_ns": 250_000_000_000_000_000_000}).encode())
    with Store.open(s3_url) as s, pytest.raises(GcBusy) as e:
        s.gc(wait_s=0)  # the CLI waits 30 s for a busy lease first
    line = str(e.value)
    assert "\n" not in line
    assert "another gc is running" in line and "mallory" in line and key in line and "delete" in line, line
