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
