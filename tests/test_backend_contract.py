"""The shipped contract suite (crewckpt.testing.contract) on every backend in this repository, each from one
factory: memory, SQLite, PostgreSQL (the session's real server), and memory seen without transactions (the
Store's and gc's non-transactional path: the ordering invariants of docs/backends.md)."""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest

from crewckpt.backends.base import Backend
from crewckpt.testing.contract import (
    BackendContract,
    BackendFactory,
    MemoryFactory,
    SqliteFactory,
    StoreContract,
    WithoutTransactionsFactory,
)


class TestMemoryContract(BackendContract, StoreContract):
    @pytest.fixture
    def backend_factory(self) -> BackendFactory:
        return MemoryFactory()


class TestSqliteContract(BackendContract, StoreContract):
    @pytest.fixture
    def backend_factory(self, tmp_path: Any) -> BackendFactory:
        return SqliteFactory(tmp_path)


class TestWithoutTransactionsContract(BackendContract, StoreContract):
    @pytest.fixture
    def backend_factory(self) -> BackendFactory:
        return WithoutTransactionsFactory(MemoryFactory())


class PgFactory(BackendFactory):
    """Stores in fresh schemas of the session's PostgreSQL server."""

    def __init__(self, server_url: str, prefix: str, gc_grace_s: float = 0.0) -> None:
        # grace 0 by default, as the S3 and split factories: every writer is on this machine's clock, and the
        # model then sees gc collect; test_store_matches_model_with_the_default_grace covers PostgreSQL's 60 s
        self.server_url, self.prefix, self.gc_grace_s = server_url, prefix, gc_grace_s
        self.schemas: list[str] = []
        self._urls: dict[int, str] = {}

    def _url(self, backend: Backend) -> str:
        return self._urls[id(backend)]

    def create(self) -> Backend:
        from crewckpt.backends.postgres import PgBackend
        schema = f"{self.prefix}_{len(self.schemas)}"
        self.schemas.append(schema)
        url = f"{self.server_url}?schema={schema}"
        b = PgBackend.create(url, gc_grace_s=self.gc_grace_s)
        self._urls[id(b)] = url
        return b

    def reopen(self, backend: Backend) -> Backend | None:
        from crewckpt.backends.postgres import PgBackend
        b = PgBackend.open(self._url(backend), gc_grace_s=self.gc_grace_s)
        self._urls[id(b)] = self._url(backend)
        return b

    def process_opener(self, backend: Backend) -> tuple[str, str] | None:
        return ("crewckpt.backends.postgres:PgBackend.open", self._url(backend))


_PG = itertools.count()


def _drop_schemas(server_url: str, f: PgFactory) -> None:
    import psycopg
    with contextlib.suppress(psycopg.Error), psycopg.connect(server_url, autocommit=True) as c:
        for schema in f.schemas:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.postgres
class TestPostgresContract(BackendContract, StoreContract):
    # each example creates a schema (DDL, ~0.5 s) and each step is several round trips: the long model run is
    # sized to finish inside pytest's 300 s timeout on 2 busy cores (40 x 25 timed out)
    long_examples = 12
    long_steps = 20
    @pytest.fixture
    def backend_factory(self, pg_server: Any) -> Iterator[BackendFactory]:
        f = PgFactory(pg_server.url, f"c{os.getpid()}_{next(_PG)}")
        yield f
        _drop_schemas(pg_server.url, f)

    def test_store_matches_model_with_the_default_grace(self, pg_server: Any) -> None:
        """PostgreSQL's own 60 s gc grace (writers on other machines' clocks): gc keeps every young commit,
        pruned or not, and the model says so (the CI failure of 2026-12-01: the model expected a sweep)."""
        from crewckpt.backends.postgres import GC_GRACE_S
        f = PgFactory(pg_server.url, f"g{os.getpid()}_{next(_PG)}", gc_grace_s=GC_GRACE_S)
        try:
            self._run_model(f, self.model_examples, self.model_steps)
        finally:
            _drop_schemas(pg_server.url, f)
