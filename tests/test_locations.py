"""Store locations (crewckpt.backends.registry): one location string names a store everywhere, and a
location no installed backend serves is one line that creates nothing."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from crewckpt import Store
from crewckpt.backends import registry
from crewckpt.backends.memory import MemoryBackend
from crewckpt.backends.registry import Location, Opened, Opener
from crewckpt.cli.main import cli
from crewckpt.errors import BackendMissing, BadLocation, CkptError, StoreExists, StoreNotFound
from crewckpt.views.exporter import LiveViewExporter


@pytest.fixture
def no_remote_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL and S3 backends as on a machine without their extras (whatever this venv holds)."""
    for scheme in ("postgresql", "postgres", "s3"):
        monkeypatch.delitem(registry._openers, scheme, raising=False)
    for module in ("crewckpt.backends.postgres", "crewckpt.backends.s3", "psycopg", "psycopg_pool"):
        monkeypatch.setitem(sys.modules, module, None)  # `import` of it raises ImportError


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text, text
    return text


# -- parsing ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "scheme", "target"), [
    (".ckpt", "sqlite", ".ckpt"),
    ("/srv/runs/.ckpt", "sqlite", "/srv/runs/.ckpt"),
    ("sqlite:.ckpt", "sqlite", ".ckpt"),
    ("sqlite:///srv/x", "sqlite", "/srv/x"),
    ("x:y", "sqlite", "x:y"),  # a relative folder with a colon: a path
    ("C:\\runs\\.ckpt", "sqlite", "C:\\runs\\.ckpt"),  # a Windows drive is no scheme
    ("c://runs", "sqlite", "c://runs"),  # one letter before "://": a drive, not a scheme
    ("./s3://bucket", "sqlite", "./s3://bucket"),
    ("SQLITE:x", "sqlite", "SQLITE:x"),  # only the exact prefixes are schemes
    ("memory:", "memory", ""),
    ("memory:tests-1", "memory", "tests-1"),
    ("postgresql://u@h:5432/db?schema=a", "postgresql", "postgresql://u@h:5432/db?schema=a"),
    ("POSTGRES://h/db", "postgres", "postgres://h/db"),
    ("s3://bucket/prefix", "s3", "s3://bucket/prefix"),
])
def test_parse(text: str, scheme: str, target: str) -> None:
    assert registry.parse(text) == Location(scheme, target, text)
    registry.opener("sqlite")  # loaded backends change nothing
    registry.opener("memory")
    assert registry.parse(text) == Location(scheme, target, text)


def test_a_pathlike_is_always_a_path() -> None:
    assert registry.parse(Path("memory:x")).scheme == "sqlite"
    assert registry.parse(Path("s3://b")).scheme == "sqlite"


@pytest.mark.parametrize(("text", "needle"), [
    ("s4://x", "unknown store scheme 's4'"),
    ("", "empty"),
    ("  ", "empty"),
    ("sqlite:", "needs a folder"),
    ("memory:a/b", "memory store name"),
    ("postgresql:host/db", "postgresql://"),
    ("s3:bucket", "./s3:bucket"),
])
def test_bad_locations_are_one_line(text: str, needle: str) -> None:
    with pytest.raises(BadLocation) as e:
        registry.parse(text)
    assert needle in one_line(e.value)


def test_unknown_scheme_lists_the_schemes_that_exist() -> None:
    with pytest.raises(BadLocation) as e:
        Store.open("s4://bucket/x")
    msg = one_line(e.value)
    for scheme in ("sqlite:", "memory:", "postgresql://", "postgres://", "s3://"):
        assert scheme in msg, msg


def test_identity_is_canonical_and_round_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    same = [".ckpt", "./.ckpt", "sub/../.ckpt", "sqlite:.ckpt", f"sqlite://{tmp_path}/.ckpt", tmp_path / ".ckpt"]
    assert {registry.identity(x) for x in same} == {str(tmp_path / ".ckpt")}
    monkeypatch.setitem(registry._openers, "fake", _FakeOpener())
    for text in (".ckpt", "x:y", "memory:a", "FAKE://h/db/"):
        ident = registry.identity(text)
        assert registry.identity(ident) == ident
    assert registry.identity("memory:a") == "memory:a"
    assert registry.identity("FAKE://h/db/") == "fake://h/db"


@pytest.mark.usefixtures("no_remote_backends")
def test_identity_of_a_url_whose_backend_is_missing() -> None:
    with pytest.raises(BackendMissing):
        registry.identity("POSTGRESQL://h/db")
    assert registry.identity("POSTGRESQL://h/db", strict=False) == "postgresql://h/db"
    with pytest.raises(BadLocation):
        registry.identity("s4://h/db", strict=False)


def test_split_rev_urls_end_at_the_first_hash_paths_at_the_last() -> None:
    assert registry.split_rev("postgresql://h/db?schema=a#main") == ("postgresql://h/db?schema=a", "main")
    assert registry.split_rev("postgresql://h/db#feature#x") == ("postgresql://h/db", "feature#x")
    assert registry.split_rev("/runs/a#b/.ckpt#main~2") == ("/runs/a#b/.ckpt", "main~2")
    assert registry.split_rev("memory:t#HEAD") == ("memory:t", "HEAD")
    assert registry.split_rev("/runs/.ckpt") == ("/runs/.ckpt", None)
    assert registry.split_rev("/runs/.ckpt#") == ("/runs/.ckpt", None)


# -- folders named like schemes, and schemes whose backend is missing --------------------------------------


def test_a_folder_named_x_colon_y_is_a_store_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with Store.init("x:y") as s:
        cid = s.commit({"a": 1})
    assert (tmp_path / "x:y" / "store.db").is_file()
    with Store.open("x:y") as s:
        assert s.read(cid) == {"a": 1} and s.location == str(tmp_path / "x:y")
    r = CliRunner().invoke(cli, ["--store", "x:y", "log", "--oneline"])
    assert r.exit_code == 0 and cid[:8] in r.output, r.output


@pytest.mark.usefixtures("no_remote_backends")
@pytest.mark.parametrize(("location", "extra"), [("postgresql://host/db", "postgres"),
                                                 ("postgres://u@host:5433/db?schema=s", "postgres"),
                                                 ("s3://bucket/x", "s3")])
def test_ckpt_init_of_a_scheme_without_its_extra_fails_in_one_line_and_creates_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, location: str, extra: str) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["init", location])
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'crewckpt[{extra}]'" in lines[0], r.output
    assert os.listdir(tmp_path) == []  # no folder "postgresql:" or "s3:"
    with pytest.raises(BackendMissing) as e:
        Store.init(location)
    assert f"pip install 'crewckpt[{extra}]'" in one_line(e.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv", [["init", "s4://x"], ["--store", "s4://x", "log"], ["list", "s4://x"]])
def test_cli_unknown_scheme_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             argv: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "unknown store scheme 's4'" in lines[0] and "postgresql://" in lines[0], r.output
    assert os.listdir(tmp_path) == []


def test_ckpt_store_env_takes_any_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CKPT_STORE", "s4://x")
    with pytest.raises(BadLocation):
        Store.open()
    monkeypatch.setenv("CKPT_STORE", "sqlite:runs")
    Store.init("runs").close()
    with Store.open() as s:
        assert s.location == str(tmp_path / "runs")
    monkeypatch.setenv("CKPT_STORE", "memory:env-test")
    with Store.init("memory:env-test") as s:
        cid = s.commit([1])
    with Store.open() as s:
        assert s.location == "memory:env-test" and s.read("HEAD") == [1] and cid == s.resolve("HEAD")


# -- memory: and memory:NAME -------------------------------------------------------------------------------


def test_named_memory_stores_are_shared_by_name_in_one_process() -> None:
    a = Store.init("memory:shared-1")
    cid = a.commit({"n": 1}, branch="exp")
    b = Store.open("memory:shared-1")
    assert b.read("exp") == {"n": 1} and b.resolve("exp") == cid and b.location == "memory:shared-1"
    b.commit({"n": 2}, branch="exp")
    assert a.read("exp") == {"n": 2}
    with pytest.raises(StoreExists) as e:
        Store.init("memory:shared-1")
    assert "memory:shared-1" in one_line(e.value)
    with pytest.raises(StoreNotFound) as e2:
        Store.open("memory:never-made")
    assert "Store.init('memory:never-made')" in one_line(e2.value)
    with Store.open("memory:never-made-2", create=True) as c:
        assert c.location == "memory:never-made-2" and c.list() == []


def test_the_cli_refuses_memory_stores_it_could_not_keep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ckpt init memory:t` said "Initialized" (exit 0) and the store was gone when the command exited."""
    monkeypatch.chdir(tmp_path)
    name = f"memory:cli-{tmp_path.name}"
    why = "a memory store lives only inside one Python process"
    for argv in (["init", name], ["init", "memory:"], ["--store", name, "init"], ["--store", "memory:", "log"]):
        r = CliRunner().invoke(cli, argv)
        assert r.exit_code == 2 and "Initialized" not in r.output, (argv, r.output)
        assert why in r.output and "use a folder (e.g. .ckpt) or sqlite:PATH" in r.output, (argv, r.output)
        assert len(r.output.strip().splitlines()) == 1, r.output
    with pytest.raises(StoreNotFound):
        Store.open(name)  # nothing was made
    r = CliRunner().invoke(cli, ["--store", name, "log"])  # any other verb: says why it finds none
    assert r.exit_code == 1 and f"no in-memory store named 'cli-{tmp_path.name}': {why}" in r.output, r.output
    assert "Store.init" not in r.output
    assert list(tmp_path.iterdir()) == []
    with Store.init(name) as made:  # in this very process (click's runner) a named one is found as before
        made.commit({"n": 1}, branch="main")
        assert CliRunner().invoke(cli, ["--store", name, "log", "--oneline"]).exit_code == 0


def test_anonymous_memory_stores_are_new_at_each_open() -> None:
    a, b = Store.open("memory:"), Store.memory()
    a.commit({"x": 1})
    assert b.list() == [] and a.location is None and b.location is None
    assert Store.init("memory:").list() == []


def test_live_view_reopens_a_named_memory_store_by_location(tmp_path: Path) -> None:
    store = Store.init("memory:view-src")
    cid = store.commit({"entities": [], "event_record": {"nodes": {}}, "trigger": "manual"})
    view = LiveViewExporter(store, tmp_path / "view", "json")
    view.publish(cid)
    assert view.close(10.0) and view.errors == 0, view.last_error
    assert list((tmp_path / "view").rglob("*.json"))


# -- a backend registered from outside --------------------------------------------------------------------


class _FakeOpener(Opener):
    """A remote-style backend kept in memory: what a third-party backend registers."""

    label = "fake"

    def __init__(self) -> None:
        self.stores: dict[str, MemoryBackend] = {}

    def identity(self, loc: Location) -> str:
        return loc.target.rstrip("/")

    def open(self, loc: Location) -> Opened:
        b = self.stores.get(self.identity(loc))
        if b is None:
            raise StoreNotFound(f"{loc.text}: no store there; create one with `ckpt init {loc.text}`")
        return Opened(b, self.identity(loc))

    def create(self, loc: Location, meta: object, *, private: bool) -> Opened:
        if self.identity(loc) in self.stores:
            raise StoreExists(f"{loc.text}: a store exists")
        b = MemoryBackend()
        with b.transaction() as txn:
            for k, v in dict(meta).items():  # type: ignore[call-overload]
                txn.meta_set(k, v)
        self.stores[self.identity(loc)] = b
        return Opened(b, self.identity(loc))


def test_a_registered_scheme_works_in_the_api_and_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeOpener()
    monkeypatch.setitem(registry._openers, "fake", fake)
    monkeypatch.chdir(tmp_path)
    assert "fake://" in registry.schemes()
    r = CliRunner().invoke(cli, ["init", "fake://h/a/"])
    assert r.exit_code == 0 and r.output.strip() == "Initialized empty crewckpt store in fake://h/a", r.output
    with Store.open("FAKE://h/a") as s:
        cid = s.commit({"k": "v"})
        assert s.location == "fake://h/a" and s.path is None
    r = CliRunner().invoke(cli, ["--store", "fake://h/a", "show", cid[:12]])
    assert r.exit_code == 0 and '"k"' in r.output, r.output
    r = CliRunner().invoke(cli, ["init", "fake://h/a"])
    assert r.exit_code == 1 and "already exists" in r.output, r.output
    with pytest.raises(CkptError, match="written fake://"):
        Store.open("fake:h")  # a registered scheme without "//": refused, not a folder
    assert os.listdir(tmp_path) == []


def test_register_refuses_to_take_over_a_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._openers, "fake2", _FakeOpener())
    with pytest.raises(ValueError, match="already registered"):
        registry.register("fake2", _FakeOpener())
    with pytest.raises(ValueError, match="not a location scheme"):
        registry.register("x", _FakeOpener())


# -- layering ----------------------------------------------------------------------------------------------


def test_only_backends_know_the_sqlite_file_name() -> None:
    """Outside crewckpt/backends/, nothing imports DB_NAME or builds a path to store.db."""
    root = Path(__file__).resolve().parent.parent / "crewckpt"
    offenders = []
    for f in root.rglob("*.py"):
        if "backends" in f.relative_to(root).parts:
            continue
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and any(a.name == "DB_NAME" for a in node.names):
                offenders.append(f"{f.name}:{node.lineno} imports DB_NAME")
            if isinstance(node, ast.BinOp) and isinstance(node.right, ast.Constant) \
                    and node.right.value == "store.db":
                offenders.append(f"{f.name}:{node.lineno} builds a path to store.db")
            if isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value == "store.db"
                                                  for a in node.args):
                offenders.append(f"{f.name}:{node.lineno} passes 'store.db'")
    assert offenders == []
