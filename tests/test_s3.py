"""The S3 backend (crewckpt/backends/s3.py) on a real S3 server (SeaweedFS, tests/s3_server.py): the shipped
contract suite, the write-time self-test, stores opened by location and the CLI, races and kill -9."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest

from crewckpt.backends.base import Backend
from crewckpt.testing.contract import BackendContract, BackendFactory, StoreContract

pytestmark = pytest.mark.s3

_N = itertools.count()


class S3Factory(BackendFactory):
    """Stores under fresh prefixes of the session's bucket (gc grace 0: every writer uses this clock)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._urls: dict[int, str] = {}

    def _url_of(self, n: int) -> str:
        bucket_prefix, _, query = self.base.partition("?")
        return f"{bucket_prefix}-{n}?{query}"

    def create(self) -> Backend:
        from crewckpt.backends.s3 import S3Backend
        url = self._url_of(next(_N))
        b = S3Backend(url, gc_grace_s=0.0)
        self._urls[id(b)] = url
        return b

    def reopen(self, backend: Backend) -> Backend | None:
        from crewckpt.backends.s3 import S3Backend
        url = self._urls[id(backend)]
        b = S3Backend(url, gc_grace_s=0.0)
        self._urls[id(b)] = url
        return b

    def process_opener(self, backend: Backend) -> tuple[str, str] | None:
        return ("crewckpt.backends.s3:S3Backend", self._urls[id(backend)])


class TestS3Contract(BackendContract, StoreContract):
    # every verb is a request (~5-10 ms here): the long model run is sized to finish well inside pytest's
    # 300 s timeout on 2 busy cores (160 steps instead of the 1,000 local backends run)
    long_examples = 10
    long_steps = 16
    def test_threads_moving_one_ref_lose_no_update_long(self, backend_factory: BackendFactory,
                                                        backend: Backend) -> None:
        """The contract's 8 x 200 contended moves are ~1,600 rounds of 3-4 requests each: ~8 minutes on 2
        busy cores; 8 x 50 keeps the same race well inside pytest's 300 s timeout."""
        self._cas_race(backend_factory, backend, threads=8, each=50)

    @pytest.fixture
    def backend_factory(self, s3_url: str) -> Iterator[BackendFactory]:
        yield S3Factory(s3_url)


class _IgnoresConditions:
    """A client that drops If-None-Match / If-Match, as some S3-compatible servers silently do."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def put_object(self, **kw: Any) -> Any:
        kw.pop("IfNoneMatch", None)
        kw.pop("IfMatch", None)
        return self._inner.put_object(**kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_server_that_ignores_conditional_writes_is_refused_for_writing(s3_url: str) -> None:
    from crewckpt.backends.s3 import S3Backend
    from crewckpt.errors import StoreWriteError
    from crewckpt.testing.contract import obj
    good = S3Backend(s3_url)
    bad = S3Backend(s3_url, client=_IgnoresConditions(good.s3))
    with pytest.raises(StoreWriteError, match="ignores conditional writes") as e:
        bad.put_many([obj(1)], 1)
    assert "\n" not in str(e.value)
    with pytest.raises(StoreWriteError, match="ignores conditional writes"):
        bad.set_ref_if_equals("refs/heads/main", None, obj(1).oid)
    assert good.has_many([obj(1).oid]) == set() and good.get_ref("refs/heads/main") is None  # nothing written
    good.put_many([obj(1)], 1)  # the real server passes the self-test
    assert good.has_many([obj(1).oid]) == {obj(1).oid}


def test_init_commit_log_read_by_location_and_cli(s3_url: str, tmp_path: Any) -> None:
    import subprocess
    import sys

    from crewckpt.errors import StoreExists, StoreNotFound
    from crewckpt.history.store import Store
    with pytest.raises(StoreNotFound, match="ckpt init"):
        Store.open(s3_url)
    r = subprocess.run([sys.executable, "-m", "crewckpt.cli.main", "--store", s3_url, "init"], capture_output=True,
                       text=True, env=dict(os.environ), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    with pytest.raises(StoreExists):
        Store.init(s3_url)
    with Store.open(s3_url) as st:
        assert st.location is not None and st.location.startswith("s3://crewckpt-tests/")
        a = st.commit({"step": 1, "text": "x" * 5000}, branch="main")
        b = st.commit({"step": 2, "text": "x" * 5000}, branch="main")
        assert st.read(a) == {"step": 1, "text": "x" * 5000}
    with Store.open(s3_url) as st:
        assert [c.id for c in st.log("main")] == [b, a]
        assert st.read("main") == {"step": 2, "text": "x" * 5000}
    r = subprocess.run([sys.executable, "-m", "crewckpt.cli.main", "--store", s3_url, "log", "--json"],
                       capture_output=True, text=True, env=dict(os.environ), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert b in r.stdout and a in r.stdout
    r = subprocess.run([sys.executable, "-m", "crewckpt.cli.main", "--store", s3_url, "fsck"],
                       capture_output=True, text=True, env=dict(os.environ), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_bad_s3_location_is_one_line() -> None:
    from crewckpt.backends.s3 import S3Location
    from crewckpt.errors import BadLocation
    with pytest.raises(BadLocation, match="unknown S3 location option"):
        S3Location("s3://b/p?endpoint=http://x&colour=red")
    loc = S3Location("s3://b/p/q/?region=eu-west-1&endpoint=http://h:1")
    assert (loc.bucket, loc.prefix, loc.key("refs", "x")) == ("b", "p/q", "p/q/refs/x")
    assert loc.identity == "s3://b/p/q?endpoint=http%3A%2F%2Fh%3A1&region=eu-west-1"


def _race_rounds(s3_url: str, rounds: int, writers: int = 16) -> None:
    import threading

    from crewckpt.backends.s3 import S3Backend
    from crewckpt.errors import RefConflict
    backends = [S3Backend(s3_url) for _ in range(writers)]
    tip: bytes | None = None
    for rnd in range(rounds):
        barrier = threading.Barrier(writers)
        won: list[bytes] = []
        lost: list[bytes] = []

        def move(i: int, old: bytes | None, new: bytes, barrier: threading.Barrier, won: list[bytes],
                 lost: list[bytes]) -> None:
            barrier.wait(timeout=60)
            try:
                backends[i].set_ref_if_equals("refs/heads/main", old, new)
                won.append(new)
            except RefConflict:
                lost.append(new)
        threads = [threading.Thread(target=move, args=(i, tip, bytes([rnd % 256, i]) * 16, barrier, won, lost))
                   for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(won) == 1 and len(lost) == writers - 1, (rnd, len(won), len(lost))
        assert backends[0].get_ref("refs/heads/main") == won[0]  # the winner's value, not a later overwrite
        tip = won[0]


def test_16_writers_moving_one_ref_have_exactly_one_winner(s3_url: str) -> None:
    _race_rounds(s3_url, rounds=3)


def test_16_writers_moving_one_ref_have_exactly_one_winner_20_times(s3_url: str) -> None:
    _race_rounds(s3_url, rounds=20)


_WRITER = """
import sys
from crewckpt.history.store import Store
st = Store.open(sys.argv[1], create=True)
i = 0
while True:
    i += 1
    cid = st.commit({"n": i, "text": "payload " * 200 + str(i)}, branch="main")
    print("ACK", i, cid, flush=True)
"""


def test_kill_9_of_a_writer_mid_checkpoint_keeps_every_acknowledged_checkpoint(s3_url: str, tmp_path: Any) -> None:
    import signal
    import subprocess
    import sys

    from crewckpt.history.store import Store
    acked: dict[str, int] = {}
    for target in (2, 5, 3):  # acknowledged checkpoints before each kill
        p = subprocess.Popen([sys.executable, "-c", _WRITER, s3_url], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ))
        try:
            assert p.stdout is not None
            for _ in range(target):
                line = p.stdout.readline()
                assert line, "writer died early"
                _, n, cid = line.split()
                acked[cid] = int(n)
        finally:
            os.kill(p.pid, signal.SIGKILL)  # mid-checkpoint: it writes the next one at once
            p.wait(timeout=60)
    with Store.open(s3_url) as st:
        for cid, n in acked.items():
            assert st.read(cid)["n"] == n
    r = subprocess.run([sys.executable, "-m", "crewckpt.cli.main", "--store", s3_url, "fsck"],
                       capture_output=True, text=True, env=dict(os.environ), cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
