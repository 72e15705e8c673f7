"""The PostgreSQL backend against a real server (the session's, tests/pg_server.py): schema, round trips,
lost connections and replays, threads and processes at once, gc while others write."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from crewckpt.backends.base import ReflogEntry, StoredObject  # noqa: E402
from crewckpt.backends.postgres import SCHEMA_VERSION, PgBackend, PgTxn, parse_location  # noqa: E402
from crewckpt.errors import (  # noqa: E402
    CkptError,
    FormatVersionError,
    RefConflict,
    StoreExists,
    StoreNotFound,
)
from crewckpt.format import objects as ob  # noqa: E402
from crewckpt.history.store import Store  # noqa: E402

pytestmark = pytest.mark.postgres
HERE = Path(__file__).parent
META = {"format_version": str(ob.FORMAT_VERSION), "gc_epoch": "0"}
REF = "refs/heads/main"


def obj(i: int, size: int = 10) -> StoredObject:
    return StoredObject(i.to_bytes(32, "big"), 1, size, b"\x00" + bytes([i % 251]) * size)


@pytest.fixture
def backend(pg_url: str) -> Iterator[PgBackend]:
    b = PgBackend.create(pg_url, META)
    yield b
    b.close()


@pytest.fixture
def store(backend: PgBackend) -> Iterator[Store]:
    s = Store(backend, None)
    yield s


def admin(pg_server: Any) -> Any:
    return psycopg.connect(pg_server.url, autocommit=True)


def kill_other_sessions(pg_server: Any) -> int:
    """pg_terminate_backend on every client session but this one (what poolers and cloud servers do to idle
    sessions); returns how many went."""
    with admin(pg_server) as c:
        rows = c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                         "AND backend_type = 'client backend' AND datname = current_database()").fetchall()
    return len(rows)


# -- locations and schema -------------------------------------------------------------------------------------

def test_location_identity_hides_the_password_and_names_port_and_schema() -> None:
    loc = parse_location("postgres://bob:s3cret@db.example:6543/ckpt?schema=team_a&sslmode=require")
    assert loc.schema == "team_a" and "s3cret" not in loc.identity
    assert loc.identity == "postgresql://bob@db.example:6543/ckpt?schema=team_a&sslmode=require"
    assert "schema" not in loc.conninfo and "sslmode=require" in loc.conninfo
    assert parse_location("postgresql://h/db").identity == "postgresql://h:5432/db?schema=crewckpt"
    for bad in ("Team", "1abc", "a-b", "x" * 64, "a;drop"):
        with pytest.raises(CkptError, match="not a plain name") as e:
            parse_location(f"postgresql://bob:pw@h/db?schema={bad}")
        assert "\n" not in str(e.value) and "pw" not in str(e.value)


def test_create_then_open_and_the_one_line_refusals(pg_url: str) -> None:
    with pytest.raises(StoreNotFound, match="no crewckpt store in schema .*ckpt init"):
        PgBackend.open(pg_url)
    PgBackend.create(pg_url, META).close()
    with pytest.raises(StoreExists, match="already exists"):
        PgBackend.create(pg_url, META)
    b = PgBackend.open(pg_url)
    assert b.meta_get("format_version") == str(ob.FORMAT_VERSION)
    assert b.meta_get("pg_schema_version") == str(SCHEMA_VERSION)
    with b.transaction() as t:  # a newer crewckpt wrote its schema version here
        t.meta_set("pg_schema_version", str(SCHEMA_VERSION + 1))
    b.close()
    with pytest.raises(FormatVersionError) as e:
        PgBackend.open(pg_url)
    assert "newer than this crewckpt understands" in str(e.value) and "\n" not in str(e.value)


def test_a_schema_holding_other_tables_is_refused(pg_url: str, pg_server: Any) -> None:
    schema = parse_location(pg_url).schema
    with admin(pg_server) as c:
        c.execute(f'CREATE SCHEMA "{schema}"')
        c.execute(f'CREATE TABLE "{schema}".app_data(x int)')
    with pytest.raises(CkptError, match="already holds other tables"):
        PgBackend.create(pg_url, META)
    with admin(pg_server) as c:
        assert c.execute('SELECT count(*) FROM pg_tables WHERE schemaname = %s', (schema,)).fetchone() == (1,)


def test_two_stores_share_one_database_through_schemas(pg_url: str) -> None:
    other = pg_url + "x"  # ?schema=<name>x
    a, b = PgBackend.create(pg_url, META), PgBackend.create(other, META)
    try:
        sa, sb = Store(a, None), Store(b, None)
        ca = sa.commit({"who": "a"}, branch="main")
        sb.commit({"who": "b"}, branch="main")
        sb.commit({"who": "b2"}, branch="other")
        assert sa.branches() == {"main": ca} and set(sb.branches()) == {"main", "other"}
        assert sa.read("main") == {"who": "a"} and sb.read("main") == {"who": "b"}
    finally:
        a.close()
        b.drop()
        b.close()


def test_an_unreachable_server_fails_in_one_line_naming_the_host() -> None:
    import socket
    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(CkptError) as e:
            PgBackend.open(f"postgresql://u:pw@127.0.0.1:{port}/db?schema=x", connect_timeout_s=5)
    msg = str(e.value)
    assert f"127.0.0.1:{port}" in msg and "cannot connect" in msg and "\n" not in msg and "pw" not in msg


# -- the write path -------------------------------------------------------------------------------------------

def test_a_checkpoint_costs_the_same_few_round_trips_for_5_or_500_new_objects(store: Store,
                                                                               backend: PgBackend) -> None:
    costs = []
    store.commit({"first": True}, branch="main")  # the first write also stores HEAD
    for n in (5, 500, 6):
        doc = {"n": n, "parts": {f"k{i}": {"text": f"part {n} {i} " * 20} for i in range(n)}}
        before = backend.round_trips
        store.commit(doc, branch="main")
        costs.append(backend.round_trips - before)
    # BEGIN + epoch with the prefetch of what the last checkpoint read (tip, HEAD, run ref, seq); the objects
    # with the commit object (counted); CAS + reflog + HEAD + run CAS + index + COMMIT
    assert costs[0] == costs[1] == costs[2] == 3, costs


def _step(t: PgTxn, branch: str, between: Any = None) -> tuple[bytes | None, int]:
    """The reads of a checkpoint-shaped transaction (one place in the code: prefetch learns per place)."""
    t.meta_get("gc_epoch")
    if between is not None:
        between()
    return t.get_ref(f"refs/heads/{branch}"), t.counter_next("seq")


def test_a_transaction_prefetches_what_the_last_one_from_the_same_place_read(backend: PgBackend) -> None:
    for _ in range(2):
        with backend.transaction() as t:
            assert isinstance(t, PgTxn)
            _step(t, "a")
            costs = t.round_trips
    assert costs == 1  # the second time the tip and the seq came with the first read


def test_reads_in_a_transaction_see_its_own_writes_also_when_prefetched(backend: PgBackend) -> None:
    x, y = b"x" * 32, b"y" * 32
    for _ in range(2):  # the second round is prefetched
        with backend.transaction() as t:
            assert isinstance(t, PgTxn)
            tip = t.get_ref(REF)
            head = t.get_symref("HEAD")
            note = t.meta_get("note")
            new = y if tip == x else x
            t.set_ref_if_equals(REF, tip, new)
            t.set_symref("HEAD", "refs/heads/other" if head != "refs/heads/other" else REF)
            t.meta_set("note", f"{note}+")
            assert t.get_ref(REF) == new
            assert t.get_symref("HEAD") == ("refs/heads/other" if head != "refs/heads/other" else REF)
            assert t.meta_get("note") == f"{note}+"
    assert backend.get_ref(REF) == y and backend.meta_get("note") == "None++"
    assert backend.get_symref("HEAD") == REF


def test_a_prefetched_read_is_fresh_and_a_prefetched_seq_follows_every_tip_locked(pg_url: str,
                                                                                 backend: PgBackend) -> None:
    other = Store(PgBackend.open(pg_url), None)
    try:
        for _ in range(2):  # learns: epoch, refs/heads/a, seq
            with backend.transaction() as t:
                assert isinstance(t, PgTxn)
                _step(t, "a")
        moved = other.commit({"o": 1}, branch="a")  # between two transactions: the prefetch reads it
        with backend.transaction() as t:
            assert isinstance(t, PgTxn)
            assert _step(t, "a")[0] == bytes.fromhex(moved)
        # the prefetch took a seq under a's lock; c's tip, locked later, was written meanwhile with a higher
        # seq: this transaction's child of it must not take the lower, prefetched one
        box: list[str] = []
        with backend.transaction() as t:
            assert isinstance(t, PgTxn)
            tip, seq = _step(t, "c", between=lambda: box.append(other.commit({"o": 2}, branch="c")))
        assert tip == bytes.fromhex(box[0])
        row = backend.index_get(tip)
        assert row is not None and seq > row.seq, (seq, row.seq)
    finally:
        other.close()


def test_a_prefetch_never_waits_for_another_writers_ref_lock(pg_url: str, backend: PgBackend) -> None:
    for _ in range(2):
        with backend.transaction() as t:
            assert isinstance(t, PgTxn)
            _step(t, "main")
    other = PgBackend.open(pg_url)
    try:
        got: list[Any] = []
        with other.transaction() as o:
            o.get_ref(REF)  # holds main's lock
            o.set_ref_if_equals(REF, None, b"o" * 32)

            def first_read() -> None:
                with backend.transaction() as t:
                    assert isinstance(t, PgTxn)
                    # the first read prefetches main: it must not wait for `other`; the tip read on demand
                    # waits for it, then sees its write
                    got.append(_step(t, "main", between=lambda: got.append("first read done"))[0])

            th = threading.Thread(target=first_read)
            th.start()
            deadline = time.monotonic() + 60
            while not got and time.monotonic() < deadline:
                time.sleep(0.01)
            assert got == ["first read done"]
        th.join(60)
        assert got == ["first read done", b"o" * 32]
    finally:
        other.close()


def test_nothing_is_prepared_server_side_so_transaction_poolers_work(store: Store, backend: PgBackend) -> None:
    for i in range(10):  # psycopg would prepare a statement after its 5th use by default
        store.commit({"i": i}, branch="main")
    conn = backend._pool.getconn()
    try:
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
        assert conn.prepare_threshold is None
    finally:
        backend._pool.putconn(conn)


def test_through_a_transaction_mode_pooler_with_threads_and_two_stores_at_once(pg_bouncer: Any,
                                                                             pg_url: str) -> None:
    """PgBouncer hands its 2 server sessions to another client after every transaction: nothing prepared
    or SET may outlive one. 2 Store objects x 2 threads commit at once, then prune + gc + fsck."""
    url = pg_bouncer.url + "?" + pg_url.split("?", 1)[1]
    a, b = PgBackend.create(url, META, gc_grace_s=0), PgBackend.open(url, gc_grace_s=0)
    errors: list[BaseException] = []
    ids: list[tuple[str, str]] = []

    def work(store: Store, branch: str) -> None:
        try:
            for i in range(12):  # psycopg would prepare a statement after its 5th use by default
                ids.append((branch, store.commit({"b": branch, "i": i, "text": f"{branch} {i} " * 30},
                                                 branch=branch)))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    try:
        stores = [Store(a, None), Store(b, None)]
        threads = [threading.Thread(target=work, args=(stores[k % 2], f"t{k}")) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        for branch, cid in ids:
            assert cid in {c.id for c in stores[0].log(branch)}
        stores[1].prune("t0", keep=2)
        stores[1].gc()
        assert not stores[0].fsck(full=True).problems
        assert len(list(stores[0].log("t1"))) == 12
    finally:
        a.close()
        b.close()


def test_same_bytes_from_two_writers_are_stored_once(pg_url: str) -> None:
    a, b = PgBackend.create(pg_url, META), PgBackend.open(pg_url)
    try:
        doc = {"shared": ["the same big text " * 100, {"deep": list(range(50))}]}
        Store(a, None).commit(doc, branch="a")
        n = a.object_stats()[0]
        Store(b, None).commit(doc, branch="b")
        assert a.object_stats()[0] == n + 1  # only the second commit object is new
    finally:
        a.close()
        b.close()


def test_ref_moves_only_by_compare_and_swap_never_backwards(backend: PgBackend) -> None:
    x, y, z = b"x" * 32, b"y" * 32, b"z" * 32
    with backend.transaction() as t:
        t.set_ref_if_equals(REF, None, x)
    with backend.transaction() as t:
        t.set_ref_if_equals(REF, x, y)
    with pytest.raises(RefConflict, match="moved"):  # a stale writer that still believes the tip is x
        with backend.transaction() as t:
            t.put_many([obj(1)], 1)
            t.set_ref_if_equals(REF, x, z)
    assert backend.get_ref(REF) == y and backend.get(obj(1).oid) is None
    with pytest.raises(RefConflict):  # creating a ref that exists
        with backend.transaction() as t:
            t.set_ref_if_equals(REF, None, z)
    assert backend.get_ref(REF) == y


def test_a_refused_statement_is_one_line_and_not_called_damage(backend: PgBackend) -> None:
    from crewckpt.errors import CorruptStore
    with pytest.raises(CkptError) as e:  # PostgreSQL text cannot hold NUL: the server side refuses it
        with backend.transaction() as t:
            t.put_many([obj(1)], 1)
            t.meta_set("note", "a\x00b")
    assert not isinstance(e.value, CorruptStore) and "\n" not in str(e.value) and "refused" in str(e.value)
    assert backend.get(obj(1).oid) is None and backend.meta_get("note") is None


# -- lost connections, replays, restarts ----------------------------------------------------------------------

def test_sessions_killed_between_checkpoints_reconnect_and_land_exactly_once(store: Store, backend: PgBackend,
                                                                             pg_server: Any) -> None:
    ids = [store.commit({"i": 0}, branch="main")]
    for i in range(1, 4):
        assert kill_other_sessions(pg_server) >= 1  # the pool's idle connection dies
        ids.append(store.commit({"i": i}, branch="main"))
    assert [c.id for c in store.log("main")] == ids[::-1]
    assert len(store.reflog("main")) == 4 and len(backend.index_rows()) == 4
    assert [store.read(c) for c in ids] == [{"i": i} for i in range(4)]


def test_a_session_killed_inside_a_transaction_is_replayed_once(backend: PgBackend, pg_server: Any) -> None:
    with backend.transaction() as t:
        tip = t.get_ref(REF)
        t.put_many([obj(1)], 5)
        assert kill_other_sessions(pg_server) >= 1
        t.put_many([obj(2)], 5)  # the dead connection shows here: everything so far is replayed
        t.set_ref_if_equals(REF, tip, obj(2).oid)
        t.reflog_append(ReflogEntry(REF, tip, obj(2).oid, 5, "commit"))
    assert backend.get_ref(REF) == obj(2).oid and len(backend.reflog(REF)) == 1
    assert backend.has_many([obj(1).oid, obj(2).oid]) == {obj(1).oid, obj(2).oid}


def test_a_replay_that_finds_the_ref_moved_is_a_clear_conflict_and_writes_nothing(
        pg_url: str, backend: PgBackend, pg_server: Any) -> None:
    other = PgBackend.open(pg_url)
    try:
        with pytest.raises(RefConflict, match="moved|replayed"):
            with backend.transaction() as t:
                tip = t.get_ref(REF)
                t.put_many([obj(1)], 5)
                kill_other_sessions(pg_server)  # our lock on the ref dies with the session...
                with other.transaction() as o:  # ...and another writer moves the ref meanwhile
                    o.set_ref_if_equals(REF, None, obj(9).oid)
                t.set_ref_if_equals(REF, tip, obj(1).oid)
                t.reflog_append(ReflogEntry(REF, tip, obj(1).oid, 5, "commit"))
        assert backend.get_ref(REF) == obj(9).oid and backend.reflog(REF) == []
        assert backend.get(obj(1).oid) is None
    finally:
        other.close()


def test_a_lost_answer_to_commit_is_resolved_by_the_token_exactly_once(backend: PgBackend,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    real = PgTxn._send
    lost = []

    def send_then_lose_the_answer(conn: Any, ops: list[Any]) -> Any:
        res = real(conn, ops)
        if any(op[0] == "COMMIT" for op in ops) and not lost:
            lost.append(1)
            conn.close()  # the COMMIT landed; its answer never arrives
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return res

    monkeypatch.setattr(PgTxn, "_send", staticmethod(send_then_lose_the_answer))
    with backend.transaction() as t:
        t.put_many([obj(1)], 5)
        t.set_ref_if_equals(REF, None, obj(1).oid)
        t.reflog_append(ReflogEntry(REF, None, obj(1).oid, 5, "commit"))
    assert lost and backend.get_ref(REF) == obj(1).oid and len(backend.reflog(REF)) == 1


def test_a_server_restart_between_checkpoints_is_survived(store: Store, pg_server: Any) -> None:
    if getattr(pg_server, "proc", None) is None:
        pytest.skip("an external server ($CKPT_TEST_PG_URL) is not restarted by the tests")
    a = store.commit({"i": 1}, branch="main")
    pg_server.restart()  # immediate shutdown: a crash
    b = store.commit({"i": 2}, branch="main")
    assert [c.id for c in store.log("main")] == [b, a] and store.read(a) == {"i": 1}


# -- threads and processes at once ----------------------------------------------------------------------------

def test_threads_share_the_pool_with_several_transactions_in_flight(backend: PgBackend) -> None:
    n = 4
    inside = threading.Barrier(n, timeout=60)  # every thread inside its transaction at the same moment
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(5):
                with backend.transaction() as t:
                    ref = f"refs/heads/t{k}"
                    tip = t.get_ref(ref)
                    t.put_many([obj(1000 * k + i)], 1)
                    if i == 0:
                        inside.wait()
                    t.set_ref_if_equals(ref, tip, obj(1000 * k + i).oid)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert backend.refs("refs/heads/") == {f"refs/heads/t{k}": obj(1000 * k + 4).oid for k in range(n)}


def run_workers(url: str, tmp_path: Path, jobs: list[tuple[str, int, str]]) -> list[list[str]]:
    """Start one commit worker per ``(branch, n, tag)`` at once; returns every acknowledged line."""
    procs, acks = [], []
    for branch, n, tag in jobs:
        ack = tmp_path / f"{tag}.ack"
        acks.append(ack)
        procs.append(subprocess.Popen([sys.executable, str(HERE / "pg_worker.py"), "commit", url, branch, str(n),
                                       str(ack), tag], stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
    return [json.loads(line) for ack in acks for line in ack.read_text().splitlines()]


def check_acknowledged(store: Store, acked: list[list[str]]) -> None:
    """Every acknowledged checkpoint is reachable from its branch tip and reads back as written."""
    import pg_worker
    reach: dict[str, set[str]] = {}
    for cid, digest, branch in acked:
        if branch not in reach:
            reach[branch] = {c.id for c in store.log(branch)}
        assert cid in reach[branch], f"{cid[:12]} on {branch} was acknowledged but is not reachable"
        assert pg_worker.digest(store.read(cid)) == digest


def test_processes_writing_one_branch_and_their_own_lose_nothing(pg_url: str, store: Store,
                                                                 tmp_path: Path) -> None:
    jobs = [("main", 15, "w0"), ("main", 15, "w1"), ("own-a", 15, "w2"), ("own-b", 15, "w3")]
    acked = run_workers(pg_url, tmp_path, jobs)
    assert len(acked) == 60
    check_acknowledged(store, acked)
    assert len(list(store.log("main"))) == 30  # one linear history: no silent fork, no lost commit
    assert not store.fsck().problems


def test_gc_while_processes_write_reused_objects_keeps_every_acknowledged_checkpoint(
        pg_url: str, store: Store, tmp_path: Path) -> None:
    gc = subprocess.Popen([sys.executable, str(HERE / "pg_worker.py"), "gc", pg_url, "8", "g0", "g1"], stderr=subprocess.PIPE,
                          text=True)
    try:
        acked = run_workers(pg_url, tmp_path, [("main", 20, "g0"), ("side", 20, "g1")])
    finally:
        _, err = gc.communicate(timeout=240)
    assert gc.returncode == 0, err[-3000:]
    check_acknowledged(store, acked)
    store.gc()
    check_acknowledged(store, acked)
    assert not store.fsck(full=True).problems


def _wait_for_acks(ack: Path, n: int, proc: subprocess.Popen[str], deadline_s: float = 120) -> None:
    import time
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if ack.exists() and len(ack.read_text().splitlines()) >= n:
            return
        try:
            proc.wait(timeout=0.05)  # poll soon again; returns at once if it exited
            return
        except subprocess.TimeoutExpired:
            continue
    raise AssertionError(f"{ack.name}: fewer than {n} acknowledgements within {deadline_s} s")


def test_fleet_with_kill_9_of_writers_and_gc_loses_no_acknowledged_checkpoint(pg_url: str, store: Store,
                                                                             tmp_path: Path) -> None:
    """slow (conftest SLOW): 6 writers (3 on one branch), a gc loop; a writer and the gc are killed with
    SIGKILL mid-run (a gc is restarted); every acknowledged checkpoint stays readable and fsck is clean."""
    import random
    import signal
    rng = random.Random(15)
    worker = str(HERE / "pg_worker.py")
    jobs = [("main", 40, "k0"), ("main", 40, "k1"), ("main", 40, "k2"), ("own-a", 40, "k3"), ("own-b", 40, "k4"),
            ("own-c", 40, "k5")]
    tags = [t for _, _, t in jobs]
    procs = {tag: subprocess.Popen([sys.executable, worker, "commit", pg_url, b, str(n), str(tmp_path / f"{tag}.ack"),
                                    tag], stderr=subprocess.PIPE, text=True) for b, n, tag in jobs}
    gc = subprocess.Popen([sys.executable, worker, "gc", pg_url, "600", *tags], stderr=subprocess.PIPE, text=True)
    victim = rng.choice(tags)
    _wait_for_acks(tmp_path / f"{victim}.ack", rng.randint(3, 20), procs[victim])
    procs[victim].send_signal(signal.SIGKILL)
    gc.send_signal(signal.SIGKILL)
    gc.wait(timeout=60)
    gc = subprocess.Popen([sys.executable, worker, "gc", pg_url, "5", *tags], stderr=subprocess.PIPE, text=True)
    for tag, p in procs.items():
        _, err = p.communicate(timeout=300)
        assert p.returncode == (-signal.SIGKILL if tag == victim else 0), err[-3000:]
    _, err = gc.communicate(timeout=300)
    assert gc.returncode == 0, err[-3000:]
    acked = [json.loads(line) for tag in tags if (tmp_path / f"{tag}.ack").exists()
             for line in (tmp_path / f"{tag}.ack").read_text().splitlines() if line.endswith("]")]
    assert len(acked) >= 5 * 40 + 3
    check_acknowledged(store, acked)
    assert not store.fsck(full=True).problems


# -- packs merged while writing: dropped in the merge's own transaction, space reused, readers never miss --

def growing(i: int) -> dict[str, Any]:
    """A document that grows by one event per step (each checkpoint adds a few objects: one pack each)."""
    return {"run": "merge", "events": {f"e{j}": {"n": j, "text": f"event {j} " * 1000} for j in range(i + 1)}}


def unnamed_packs(backend: PgBackend) -> list[str]:
    """Packs that no object's frame names: bytes nothing can ever read (what gc would still have to drop)."""
    from crewckpt.history.gc import _pack_of
    metas = list(backend.iter_objects())
    used = {_pack_of(m.head) for m in metas}
    return [m.oid.hex()[:12] for m in metas if m.kind == ob.PACK and m.oid[:8] not in used]


def test_a_merge_that_fails_to_drop_the_old_packs_changes_nothing(store: Store, backend: PgBackend,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The replaced packs go in the transaction that reframes the last members: a failure there (or a kill)
    leaves the old packs and frames as they were, never a merged copy beside packs nothing names."""
    import crewckpt.history.store as store_mod
    monkeypatch.setattr(store_mod, "AUTO_PACKS", 4)
    real = PgTxn._rows

    def refuse_deletes(self: PgTxn, sql: str, args: Any) -> list[tuple[Any, ...]]:
        if sql.startswith("DELETE FROM") and ".objects " in sql:
            raise CkptError("injected: the server refused the delete")
        return real(self, sql, args)

    monkeypatch.setattr(PgTxn, "_rows", refuse_deletes)
    # the first checkpoint is one object (no pack); the 5th brings the 4th pack: its merge fails
    ids = [store.commit(growing(i), branch="main", run_id="r") for i in range(5)]
    assert len(store._my_packs) == 4  # kept for the next try
    assert len([m for m in backend.iter_objects() if m.kind == ob.PACK]) == 4  # nothing merged, nothing lost
    assert unnamed_packs(backend) == []
    monkeypatch.setattr(PgTxn, "_rows", real)
    ids.append(store.commit(growing(5), branch="main", run_id="r"))  # merges all 5
    assert store._my_packs == []
    assert len([m for m in backend.iter_objects() if m.kind == ob.PACK]) == 1
    assert unnamed_packs(backend) == []
    assert [store.read(c) for c in ids] == [growing(i) for i in range(6)]


def test_a_merge_does_not_wait_for_other_writers_open_transactions(store: Store, backend: PgBackend,
                                                                    pg_url: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping packs takes no exclusive gc lock: a writer's merge must not stall the fleet (nor wait for a
    checkpoint that is still open elsewhere)."""
    import crewckpt.history.store as store_mod
    monkeypatch.setattr(store_mod, "AUTO_PACKS", 3)
    for i in range(3):  # 2 packs (the first checkpoint is one object); the next one merges
        store.commit(growing(i), branch="main", run_id="r")
    other = PgBackend.open(pg_url)
    done = threading.Event()
    try:
        with other.transaction() as t:  # an open checkpoint of another writer: it holds the shared gc lock
            t.put_many([obj(7)], 1)
            assert isinstance(t, PgTxn) and t._conn is not None
            th = threading.Thread(target=lambda: (store.commit(growing(3), branch="main", run_id="r"), done.set()))
            th.start()
            merged = done.wait(timeout=60)  # a few ms when nothing waits; on failure: until the 60 s deadline
        th.join(timeout=60)
    finally:
        other.close()
    assert merged, "the merge waited for another writer's open transaction"
    assert len([m for m in backend.iter_objects() if m.kind == ob.PACK]) == 1


def test_bytes_as_written_stay_near_the_live_frames_while_packs_merge(store: Store, backend: PgBackend,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each merge's dropped packs are made reusable at once (VACUUM), so the objects table does not keep
    every per-checkpoint pack ever written until gc."""
    import base64
    import random

    import crewckpt.history.store as store_mod
    monkeypatch.setattr(store_mod, "AUTO_PACKS", 8)
    # each checkpoint: a new ~12 KB version of one text (~9 KB compressed alone); 8 versions merged compress
    # to about one
    base = base64.b64encode(random.Random(15).randbytes(9000)).decode()
    for i in range(200):
        store.commit({"run": "merge", "i": i, "text": base + str(i)}, branch="main", run_id="r")
    with admin_url(backend) as c:
        table = c.execute(f"SELECT pg_total_relation_size('\"{backend.loc.schema}\".objects')").fetchone()[0]
        frames = c.execute(f"SELECT sum(length(frame)) FROM \"{backend.loc.schema}\".objects").fetchone()[0]
    # ~264 KB of live frames; every per-checkpoint pack kept until gc: a 2.6 MB table; reused: 0.67 MB
    assert table < 3 * int(frames) + (256 << 10), (table, frames)


def admin_url(backend: PgBackend) -> Any:
    return psycopg.connect(backend.loc.conninfo, autocommit=True)


def test_a_reader_never_misses_an_object_while_the_writer_merges_packs(store: Store, backend: PgBackend,
                                                                       pg_url: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that read a member's old frame finds its pack dropped by a merge committed meanwhile; it must
    read the frame again (now naming the merged pack), never report the object missing or damaged."""
    import crewckpt.history.store as store_mod
    monkeypatch.setattr(store_mod, "AUTO_PACKS", 2)
    acked: list[tuple[str, int]] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    reads = 0

    def reader() -> None:
        nonlocal reads
        rb = PgBackend.open(pg_url)
        try:
            while not stop.is_set() or reads == 0:
                for cid, i in list(acked):
                    if Store(rb, None).read(cid) != growing(i):  # a fresh handle: no pack cache
                        raise AssertionError(f"{cid[:12]} read back wrong")
                    reads += 1
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)
        finally:
            rb.close()

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for th in threads:
        th.start()
    try:
        for i in range(40):
            acked.append((store.commit(growing(i), branch="main", run_id="r"), i))
    finally:
        stop.set()
        for th in threads:
            th.join(timeout=120)
    assert not errors, errors[0]
    assert reads > 40
    assert len([m for m in backend.iter_objects() if m.kind == ob.PACK]) <= 20  # 39 packs, merged by twos
