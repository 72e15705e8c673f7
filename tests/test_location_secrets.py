"""Location defects from the attacker pass (second wave): a secret in a location (a PostgreSQL password or
sslpassword, in the userinfo or the query string; an S3 key pair) is never shown or recorded; S3 options and
repeated query keys are checked with one line; a SQLite folder name is never read by SQLite as a URI; a failed
init removes what it made; no store is created directly in ``/``."""

from __future__ import annotations

import os
import socket
import sqlite3
from pathlib import Path

import orjson
import pytest
from cli_helpers import ckpt, ok

from crewckpt.backends import registry
from crewckpt.backends import sqlite as sqlite_backend
from crewckpt.errors import BadLocation, CkptError
from crewckpt.history import trust
from crewckpt.history.store import Store

SECRETS = ("S3CRETpw", "SSLS3CRET", "AKIAKEY", "AWSS3CRET")


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then closed: connecting is refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one_clean_line(r, code: int) -> str:  # type: ignore[no-untyped-def]
    """The error line of a failed ``ckpt`` run: exit ``code``, one line, no secret of SECRETS in any output."""
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    for secret in SECRETS:
        assert secret not in r.stdout + r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "unexpected" not in lines[0], r.stderr
    return lines[0]


def test_a_postgresql_password_in_the_query_string_is_masked_in_errors() -> None:
    line = _one_clean_line(ckpt("postgresql://u@127.0.0.1:1/db?password=S3CRETpw&schema=Bad", "log"), 1)
    assert "password=***" in line and "schema 'Bad'" in line
    port = _closed_port()
    line = _one_clean_line(ckpt(f"postgresql://u:S3CRETpw@127.0.0.1:{port}/db?sslpassword=SSLS3CRET&schema=ok",
                                "log"), 1)
    assert "cannot connect" in line
    # the canonical location (shown by init, recorded by remote add and the trust file) holds no secret at all
    ident = registry.identity(f"postgresql://u:S3CRETpw@127.0.0.1:{port}/db?sslpassword=SSLS3CRET&sslmode=require")
    assert ident == f"postgresql://u@127.0.0.1:{port}/db?schema=crewckpt&sslmode=require"


def test_s3_credentials_in_the_url_are_refused_without_showing_them() -> None:
    for url in ("s3://AKIAKEY:AWSS3CRET@b/p", "s3://AKIAKEY@b/p?endpoint=http://127.0.0.1:1",
                "s3://b/p?endpoint=http://AKIAKEY:AWSS3CRET@127.0.0.1:1"):
        line = _one_clean_line(ckpt(url, "log"), 2)
        assert "credentials" in line and "AWS_" in line, line
        with pytest.raises(BadLocation):
            registry.identity(url)


def test_remote_listing_and_the_trust_file_never_hold_a_secret(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    ok(ckpt(None, "init", store))
    url = "postgresql://u:S3CRETpw@db.example:5433/x?sslpassword=SSLS3CRET&password=S3CRETpw&schema=a"
    r = ok(ckpt(store, "remote", "add", "--no-check", "up", url))
    assert not any(s in r.stdout + r.stderr for s in SECRETS)
    with Store.open(store) as s:
        assert s.remotes() == {"up": "postgresql://u@db.example:5433/x?schema=a"}
        # a remote recorded by an older crewckpt, password and all: listed masked
        conf = {**s.remotes(), "old": "postgresql://u:S3CRETpw@h:5432/x?schema=b&sslpassword=SSLS3CRET"}
        s.backend.meta_set("remotes", orjson.dumps(conf).decode())
    for args in (("remote", "-v"), ("remote", "--json")):
        out = ok(ckpt(store, *args)).stdout
        assert "up" in out and "old" in out and "u:***@h:5432" in out
        assert not any(sec in out for sec in SECRETS), out
    trust_file = (trust.config_dir() / trust.FILE).read_text()
    assert "db.example" in trust_file and not any(sec in trust_file for sec in SECRETS)


def test_redact_and_scrub_mask_every_secret_bearing_part() -> None:
    assert registry.redact("postgresql://u:pw@h/db?password=a&schema=s&sslpassword=b#x") == \
        "postgresql://u:***@h/db?password=***&schema=s&sslpassword=***#x"
    assert registry.redact("s3://K:S@b/p") == "s3://***@b/p"
    assert registry.redact("./plain:folder?password=x") == "./plain:folder?password=x"  # a path, not a URL
    assert registry.strip_secrets("postgresql://u:pw@h/db?password=a") == "postgresql://u@h/db"
    assert registry.scrub("cannot reach myb://u:S3CRETpw@h/x?api_token=AWSS3CRET now") == \
        "cannot reach myb://u:***@h/x?api_token=*** now"
    # a backend not installed here: its recorded identity drops secrets too
    assert "S3CRETpw" not in registry.Opener().identity(registry.Location("myb", "myb://u:S3CRETpw@h/x", ""))


@pytest.mark.parametrize(("url", "word"), [
    ("s3://b/p?endpoint=file:///etc/passwd", "endpoint"),
    ("s3://b/p?endpoint=http://h:1/some/path", "endpoint"),
    ("s3://b/p?endpoint=http://h:99999", "endpoint"),
    ("s3://b/p?region=%0a", "region"),
    ("s3://b/p?region=us east", "region"),
    ("s3://b/p?endpoint=http://a:1&endpoint=http://b:2", "endpoint= is given more than once"),
    ("s3://b/p?region=x&region=y", "region= is given more than once"),
    ("postgresql://u@h/db?schema=a&schema=b", "schema= is given more than once"),
    ("postgresql://u@h/db?host=a&host=b", "host= is given more than once"),
])
def test_bad_s3_options_and_repeated_keys_are_one_bad_location_line(url: str, word: str) -> None:
    with pytest.raises(BadLocation, match=word):
        registry.identity(url)
    line = _one_clean_line(ckpt(url, "log"), 2)
    assert word in line
    assert registry.identity("s3://b/p?endpoint=https://h:9000/&region=us-east-1")  # a good one still parses


@pytest.mark.parametrize("name", ["./file:v", "file:w?mode=memory&z=", "sqlite:file:x?mode=rwc"])
def test_a_sqlite_folder_name_is_never_read_as_a_uri(name: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ok(ckpt(None, "init", name))
    folder = tmp_path / name.removeprefix("sqlite:").removeprefix("./")
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]  # nothing else was made
    with Store.open(name) as s:  # a complete store, schema and all, in that folder
        tip = s.commit({"n": 1}, branch="main")
        assert s.location == str(folder)
    with Store.open(str(folder)) as s:
        assert s.resolve("main") == tip
    assert (folder / "store.db").stat().st_size > 0


def test_a_failed_init_removes_the_folders_it_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: object, **_k: object) -> None:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(sqlite_backend.SqliteBackend, "create", broken)
    (tmp_path / "kept").mkdir()
    with pytest.raises(CkptError, match="cannot create the store") as e:
        Store.init(tmp_path / "kept" / "a" / "b")
    assert "\n" not in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["kept"] and os.listdir(tmp_path / "kept") == []
    line = _one_clean_line(ckpt(None, "init", str(tmp_path / "new")), 1)
    assert "cannot create the store" in line and not (tmp_path / "new").exists()


def test_no_store_is_created_directly_in_the_filesystem_root() -> None:
    root_db = Path("/store.db")
    if root_db.exists():
        pytest.skip("/store.db exists already on this machine")
    try:
        for loc in ("sqlite:///", "/"):
            line = _one_clean_line(ckpt(None, "init", loc), 1)
            assert "filesystem root" in line
            with pytest.raises(CkptError, match="filesystem root"):
                Store.init(loc)
        assert not root_db.exists()
    finally:
        for leftover in ("/store.db", "/store.db-wal", "/store.db-shm"):  # main made these; never leave them
            if os.path.exists(leftover) and leftover != "/":
                os.unlink(leftover)


def test_crewai_log_lines_never_hold_a_location_secret(monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """The exit reports of failed checkpoints and failed pushes (a log outlives the terminal)."""
    import logging

    from crewckpt.crewai import publish, writer

    store = "postgresql://u:S3CRETpw@h:5432/db?schema=a&sslpassword=SSLS3CRET"
    dest = "postgresql://u@h2:5432/db?password=S3CRETpw&schema=b"
    pub = publish.Publisher(store, dest)
    pub.failed, pub.last_error = 2, f"{dest}: cannot connect"
    monkeypatch.setattr(publish, "_publishers", {(store, dest): pub})
    monkeypatch.setattr(writer, "_tally", {store: [1, 3, f"{store}: cannot connect"]})
    with caplog.at_level(logging.WARNING, logger="crewckpt"):
        publish.report_push_failures()
        writer.report_failures()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "2 of 2 pushes" in text and "3 of 4 checkpoints" in text and "h2:5432" in text
    assert not any(s in text for s in SECRETS), text


@pytest.mark.parametrize("url", [
    "pg+s3://u@h/db?schema=a&objects=s3://b/p&endpoint=http://h:1&endpoint=http://h:2",
    "pg+s3://u@h/db?objects=s3://b/p&objects=s3://c/q",
    "pg+s3://u@h/db?objects=s3://b/p&schema=a&schema=b",
])
def test_a_repeated_key_in_a_split_location_is_one_bad_location_line(url: str) -> None:
    with pytest.raises(BadLocation, match="is given more than once"):
        registry.identity(url)
    assert "given more than once" in _one_clean_line(ckpt(url, "log"), 2)


def test_a_split_location_never_shows_its_secrets() -> None:
    url = "pg+s3://u:S3CRETpw@127.0.0.1:1/db?sslpassword=SSLS3CRET&objects=gs://b/p"
    assert "objects=" in _one_clean_line(ckpt(url, "log"), 2)
    assert "S3CRETpw" not in registry.identity(
        "pg+s3://u:S3CRETpw@h/db?sslpassword=SSLS3CRET&objects=s3://b/p&endpoint=http://h:1")
