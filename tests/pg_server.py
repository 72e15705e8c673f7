"""A throwaway PostgreSQL server for tests and benchmarks: initdb + postgres in a temporary folder, on
127.0.0.1 and a free port, stopped (immediate shutdown) when done.

PostgreSQL refuses to run as root: as root, the data folder is given to the ``postgres`` user (the Debian
package creates it) and the server runs as that user; otherwise it runs as the current user.

The binaries are found through ``$CKPT_PG_BINDIR``, then ``pg_config --bindir``, then ``initdb``/``postgres``
on PATH, then the newest ``/usr/lib/postgresql/*/bin`` (Debian's layout). :func:`find_bindir` returns None when
none has them: the tests that need a server skip (or fail under ``CKPT_REQUIRE_POSTGRES=1``, as in CI).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg
import server_process

START_TIMEOUT_S = 60.0  # initdb and the first start on 2 busy cores take a few seconds; this is a deadline
# tests: WAL is still written before a commit returns (so a killed server keeps every acknowledged
# transaction), only not fsynced: no claims about power loss. Never synchronous_commit=off: a crash then
# loses acknowledged commits, which the restart tests would (rightly) report.
FAST = {"fsync": "off", "full_page_writes": "off"}


def find_bindir() -> Path | None:
    """The folder holding ``initdb``, ``postgres`` and ``pg_ctl``, or None (see the module docstring)."""
    def ok(d: Path | str | None) -> Path | None:
        if d and all((Path(d) / b).is_file() for b in ("initdb", "postgres")):
            return Path(d)
        return None

    if found := ok(os.environ.get("CKPT_PG_BINDIR")):
        return found
    if shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=30).stdout
            if found := ok(out.strip()):
                return found
    if (initdb := shutil.which("initdb")) and (found := ok(Path(os.path.realpath(initdb)).parent)):
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"),
                      key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    for d in reversed(versions):
        if found := ok(d):
            return found
    return None


def _answers(url: str, **kw: object) -> bool:
    """True when a server at ``url`` runs a query now."""
    try:
        with psycopg.connect(url, connect_timeout=2, autocommit=True, **kw) as c:  # type: ignore[arg-type]
            c.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One running server. ``url``: ``postgresql://postgres@127.0.0.1:PORT/postgres`` (trust auth, loopback
    only). Use :meth:`start` and :meth:`stop`, or ``with PgServer.start(...) as srv``."""

    def __init__(self, bindir: Path, root: Path, user: str | None, settings: dict[str, str]) -> None:
        self.bindir, self.root, self.user = bindir, root, user
        self.data = root / "data"
        self.log = root / "server.log"
        self.settings = settings
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @classmethod
    def start(cls, bindir: Path, settings: dict[str, str] | None = None) -> PgServer:
        """initdb a fresh cluster in a new temporary folder and start it; returns once it accepts connections.

        Raises:
            RuntimeError: initdb failed, or the server exited or did not accept connections within
                START_TIMEOUT_S (the message carries the end of its log).
        """
        root = Path(tempfile.mkdtemp(prefix="ckpt-pg-"))
        user = None
        if os.geteuid() == 0:
            user = "postgres"
            try:
                pw = pwd.getpwnam(user)
            except KeyError:
                shutil.rmtree(root, ignore_errors=True)
                raise RuntimeError("running as root and no 'postgres' user exists: PostgreSQL will not run as "
                                   "root; install the server package (it creates the user)") from None
            os.chown(root, pw.pw_uid, pw.pw_gid)
            os.chmod(root, 0o700)
        srv = cls(bindir, root, user, dict(FAST if settings is None else settings))
        try:
            srv._initdb()
            for _attempt in range(5):  # another process may take the free port between probe and bind
                srv.port = _free_port()
                if srv._launch():
                    return srv
            raise RuntimeError(f"PostgreSQL did not start; log:\n{srv._log_tail()}")
        except BaseException:
            srv.stop()
            raise

    def _as_user(self) -> dict[str, object]:
        """Popen arguments that drop root to ``self.user`` (its group, no supplementary groups)."""
        if self.user is None:
            return {}
        pw = pwd.getpwnam(self.user)
        return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}

    def _run(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, **self._as_user(), capture_output=True, text=True, timeout=START_TIMEOUT_S,
                              cwd=self.root, env={**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"})

    def _initdb(self) -> None:
        r = self._run([str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                       "-E", "UTF8", "--no-sync"])
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed ({r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}")

    def _launch(self) -> bool:
        """Start postgres on ``self.port``; True once it accepts a connection, False if it exited because the
        port was taken (so the caller picks another)."""
        args = [str(self.bindir / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.root),
                "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"]
        for k, v in self.settings.items():
            args += ["-c", f"{k}={v}"]
        logf = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(args, **self._as_user(), stdout=logf, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.root, start_new_session=True,
                                         env={**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"})
        finally:
            logf.close()
        return server_process.wait_ready(self.proc, lambda: _answers(self.url), self.log, "PostgreSQL",
                                         START_TIMEOUT_S, ("already in use", "could not bind"))

    def restart(self) -> None:
        """Immediate shutdown (as a crash would) and start again on the same port and data."""
        self._kill()
        if not self._launch():
            raise RuntimeError(f"PostgreSQL could not restart on port {self.port}; log:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return server_process.log_tail(self.log)

    def _kill(self) -> None:
        p, self.proc = self.proc, None
        server_process.stop(p, signal.SIGQUIT, group=True)  # postgres: immediate shutdown

    def stop(self) -> None:
        """Immediate shutdown and delete the folder (idempotent)."""
        self._kill()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def find_pgbouncer() -> Path | None:
    """The ``pgbouncer`` binary (PATH or Debian's /usr/sbin), or None."""
    found = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.path.isfile("/usr/sbin/pgbouncer") else None)
    return Path(found) if found else None


class PgBouncer:
    """A PgBouncer in front of a :class:`PgServer`, in ``pool_mode`` (default transaction: server sessions
    are handed to another client after every transaction, which breaks session state and prepared
    statements). ``url`` points at it. Same user rules as the server (PgBouncer refuses root too)."""

    def __init__(self, server: PgServer, binary: Path, pool_mode: str, pool_size: int) -> None:
        self.server = server
        self.root = Path(tempfile.mkdtemp(prefix="ckpt-pgb-"))
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.binary, self.pool_mode, self.pool_size = binary, pool_mode, pool_size

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @classmethod
    def start(cls, server: PgServer, binary: Path, pool_mode: str = "transaction", pool_size: int = 3) -> PgBouncer:
        """Start it; returns once a query goes through it. Raises RuntimeError with its log otherwise."""
        b = cls(server, binary, pool_mode, pool_size)
        try:
            if server.user is not None:
                pw = pwd.getpwnam(server.user)
                os.chown(b.root, pw.pw_uid, pw.pw_gid)
            (b.root / "users.txt").write_text('"postgres" ""\n')
            for _attempt in range(5):
                b.port = _free_port()
                if b._launch():
                    return b
            raise RuntimeError(f"PgBouncer did not start; log:\n{b._log()}")
        except BaseException:
            b.stop()
            raise

    def _log(self) -> str:
        return server_process.log_tail(self.root / "pgbouncer.log")

    def _launch(self) -> bool:
        ini = self.root / "pgbouncer.ini"
        ini.write_text(f"""[databases]
postgres = host=127.0.0.1 port={self.server.port} dbname=postgres user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.root / 'users.txt'}
pool_mode = {self.pool_mode}
default_pool_size = {self.pool_size}
max_client_conn = 200
logfile = {self.root / 'pgbouncer.log'}
ignore_startup_parameters = extra_float_digits,options
""")
        os.chmod(ini, 0o644)
        os.chmod(self.root / "users.txt", 0o644)
        self.proc = subprocess.Popen([str(self.binary), str(ini)], **self.server._as_user(),  # type: ignore[call-overload]
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.root, start_new_session=True)
        return server_process.wait_ready(self.proc, lambda: _answers(self.url, prepare_threshold=None),
                                         self.root / "pgbouncer.log", "PgBouncer", START_TIMEOUT_S,
                                         ("already in use", "bind"))

    def stop(self) -> None:
        """Stop it by its pid and delete its folder (idempotent)."""
        p, self.proc = self.proc, None
        server_process.stop(p)
        shutil.rmtree(self.root, ignore_errors=True)
