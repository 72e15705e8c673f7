"""Coverage-guided fuzzing (atheris, libFuzzer) of crewckpt's decoders and parsers; not part of CI.

    pip install atheris
    python scripts/fuzz_atheris.py -max_total_time=60          # libFuzzer flags pass through
    python scripts/fuzz_atheris.py -runs=200000 corpus_dir/

Each input is split by its first byte into one target: stored frames (``Codec.decode``, ``parse_packed``),
object bodies (``unpackb``, ``decode_tree``, ``Commit.decode``), a verified read of a stored object
(``ObjectDB.verify``), revisions (``revisions.parse``), branch names (``check_branch``) and SQLite JSONB
(``jsonb_to_value``). A target may return or raise its documented error (docs/invariants.md, section 7);
any other exception is a crash that libFuzzer reports with the input that caused it. The hypothesis
versions of these checks run in CI (tests/test_fuzz_*.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

with atheris.instrument_imports():
    from crewckpt.backends.base import StoredObject
    from crewckpt.backends.memory import MemoryBackend
    from crewckpt.errors import BadRefName, DecodeError, IntegrityError, MissingObject, UnknownRevision
    from crewckpt.format import objects as ob
    from crewckpt.format.frame import Codec, parse_packed
    from crewckpt.history import refnames, revisions
    from crewckpt.history.objectdb import ObjectDB
    from crewckpt.views.jsonb import JsonbError, jsonb_to_value

CODEC = Codec()
ODB = ObjectDB(MemoryBackend())


def _text(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass") if data.isascii() else data.decode("utf-8", "replace")


def one_input(data: bytes) -> None:
    if not data:
        return
    target, rest = data[0] % 7, data[1:]
    try:
        if target == 0:
            CODEC.decode(rest)
        elif target == 1:
            parse_packed(rest)
        elif target == 2:
            ob.unpackb(rest)
        elif target == 3:
            ob.decode_tree(rest)
            ob.Commit.decode(rest)
        elif target == 4:
            kind = rest[0] % 7 if rest else 0
            ODB.verify(StoredObject(b"\x01" * 32, kind, len(rest), rest[1:]))
        elif target == 5:
            t = _text(rest)
            revisions.parse(t)
            refnames.check_branch(t)
        else:
            jsonb_to_value(rest)
    except (DecodeError, IntegrityError, MissingObject, UnknownRevision, BadRefName, JsonbError):
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()
