"""The CLI's new hint lines (session 7) against what a user may type: secrets in locations that shell quoting
splits, revisions git users write, deleting branches whose refs are odd (docs/cli.md)."""

from __future__ import annotations

import pytest
from cli_helpers import ckpt


@pytest.mark.parametrize("location, secret", [
    ("postgresql://bob:s3cr'et@db.example/ck", "s3cr"),  # a quote: shlex wraps it in '"'"'
    ("postgresql://bob:two words@db.example/ck", "words"),  # a space: shlex quotes the whole argument
    ("s3://bucket/x?secret_key=a b", " b"),
    ("s3://AKIA:se'cret@bucket/x", "AKIA"),
])
def test_the_global_option_hint_never_echoes_a_secret(location: str, secret: str) -> None:
    # before: the secrets were scrubbed in the joined command line, where a URL ends at the first quote or
    # space shlex put in: the password was echoed whole
    for args in (("gc", "--store", location), ("gc", f"--store={location}")):
        result = ckpt(None, *args)
        assert result.exit_code == 2 and "is an option of ckpt itself" in result.stderr
        assert secret not in result.stderr and "***" in result.stderr, result.stderr


@pytest.fixture
def two_commits(tmp_path):  # type: ignore[no-untyped-def]
    from crewckpt import Store

    s = Store.init(tmp_path / ".ckpt")
    s.commit({"a": 1}, branch="main")
    s.commit({"a": 2}, branch="main")
    s.close()
    return str(tmp_path / ".ckpt")


@pytest.mark.parametrize("rev, says", [
    # before: "dates in @{...} are not supported" for git's upstream and push shorthands
    ("@{u}", "@{upstream} (@{u}, @{push}) is not supported; name the remote-tracking ref"),
    ("main@{upstream}", "@{upstream} (@{u}, @{push}) is not supported"),
    ("main@{U}", "@{upstream} (@{u}, @{push}) is not supported"),
    ("@{push}", "@{upstream} (@{u}, @{push}) is not supported"),
    ("main@{yesterday}", "dates in @{...} are not supported"),
    # before: "cannot parse '!'; use ~N, ^ or ^N": git's range shorthands of one commit
    ("main^!", "ranges (A..B, A...B, ^A, A^!, A^@, A^-) are not supported"),
    ("main^@", "ranges (A..B, A...B, ^A, A^!, A^@, A^-) are not supported"),
    ("main^-", "ranges (A..B, A...B, ^A, A^!, A^@, A^-) are not supported"),
    ("main~1^-2", "ranges (A..B, A...B, ^A, A^!, A^@, A^-) are not supported"),
    # before: "cannot parse '{commit}'": git's peeling; every crewckpt revision is a commit already
    ("main^{commit}", "^{...} (peeling) is not needed: every revision names a commit; write 'main'"),
    ("main~1^{}", "^{...} (peeling) is not needed: every revision names a commit; write 'main~1'"),
    # before: "unknown revision ':/fix': not a commit id, ..."
    (":/fix", "searching commit messages (:/TEXT) is not supported; find the commit in `ckpt log`"),
])
def test_git_revision_syntax_gets_a_line_naming_it(two_commits: str, rev: str, says: str) -> None:
    result = ckpt(two_commits, "log", "-n", "1", rev)
    assert result.exit_code != 0 and says in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1


def test_deleting_a_remote_tracking_ref_as_a_branch_says_what_it_is(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # before: "no branch named 'origin/main'; see `ckpt branch`" (which does not list tracking refs)
    from crewckpt import Store

    src = Store.init(tmp_path / "o" / ".ckpt")
    src.commit({"a": 1}, branch="main")
    src.close()
    dst = str(tmp_path / "c" / ".ckpt")
    assert ckpt(None, "clone", str(tmp_path / "o" / ".ckpt"), dst).exit_code == 0
    for flag in ("-d", "-D"):
        result = ckpt(dst, "branch", flag, "origin/main")
        assert result.exit_code != 0 and result.stderr == (
            "ckpt: error: 'origin/main' is a remote-tracking ref (refs/remotes/origin/main), not a branch: "
            "`ckpt remote prune origin` deletes it once origin no longer has main, `ckpt remote remove origin` "
            "deletes all of origin's\n"), result.stderr
    with Store.open(dst) as s:
        assert "refs/remotes/origin/main" in s.backend.refs("refs/remotes/")
    assert "no branch named 'nope'" in ckpt(dst, "branch", "-d", "nope").stderr


@pytest.mark.parametrize("args, fixed", [
    # before: `ckpt --store log` and `ckpt --store --json log -n 1` (the next option taken as the location)
    (("log", "--store"), "ckpt --store LOCATION log"),
    (("log", "-n", "1", "--store", "--json"), "ckpt --store LOCATION log -n 1 --json"),
])
def test_the_global_option_hint_without_a_value_shows_where_the_value_goes(args: tuple[str, ...], fixed: str) -> None:
    result = ckpt(None, *args)
    assert result.exit_code == 2 and f"write `{fixed}`" in result.stderr, result.stderr


@pytest.mark.parametrize("password", ["two words", "tab\there", "q'uote"])
def test_a_postgres_error_quoting_the_password_masks_it(password: str) -> None:
    # before: libpq's own reason ('unexpected spaces found in "two words", use percent-encoded spaces') was
    # put into the one-line error as it was: the password, echoed
    pytest.importorskip("psycopg")
    result = ckpt(f"postgresql://bob:{password}@127.0.0.1:1/db", "log")
    assert result.exit_code != 0 and "cannot connect" in result.stderr, result.stderr
    assert password not in result.stderr and password.split()[-1] not in result.stderr, result.stderr


def test_deleting_a_branch_typed_decomposed_names_its_tip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # before: 'Deleted branch café (was ?)': the tip was looked up with the name as typed (NFD), the branch
    # is stored NFC
    import unicodedata

    from crewckpt import Store

    s = Store.init(tmp_path / ".ckpt")
    tip = s.commit({"a": 1}, branch="main")
    s.create_branch(unicodedata.normalize("NFC", "café"), "main")
    s.close()
    nfd = unicodedata.normalize("NFD", "café")
    result = ckpt(str(tmp_path / ".ckpt"), "branch", "-d", nfd)
    assert result.exit_code == 0 and result.stdout == f"Deleted branch {unicodedata.normalize('NFC', 'café')} (was {tip[:8]})\n"


def test_the_prune_held_line_names_a_few_branches_and_counts_the_rest(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # before: every holding branch was listed on the one line (a store with hundreds of fork branches: a
    # line of thousands of characters)
    from crewckpt import Store

    s = Store.init(tmp_path / ".ckpt")
    ids = [s.commit({"n": i}, branch="main") for i in range(4)]
    for k in range(12):
        s.create_branch(f"fork{k:02d}", ids[2])
    s.close()
    result = ckpt(str(tmp_path / ".ckpt"), "prune", "--keep", "1", "--branch", "main")
    assert result.exit_code == 0 and result.stdout == (
        "0 checkpoint(s) pruned: 3 older checkpoint(s) of main are history of other branches (fork00, fork01, "
        "fork02, fork03, fork04 and 7 more); prune those branches or delete them first\n"), result.stdout
    as_json = ckpt(str(tmp_path / ".ckpt"), "prune", "--keep", "1", "--branch", "main", "--json")
    assert len(__import__("json").loads(as_json.stdout)["held"][0]["by"]) == 12  # --json keeps them all
