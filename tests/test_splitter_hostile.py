"""A document from someone else (an imported checkpoint, a plain-JSON store's commit) cannot make the splitter
hold or pack many times its size: its caches stay within their bounds whatever the nesting, the key sizes or
the container sizes (issue 11/12: untrusted data; objects_format.md 4.1: caches never affect ids)."""

from __future__ import annotations

from typing import Any

import msgpack

from crewckpt.format import objects as ob
from crewckpt.history.snapshot import Splitter


def _oid(kind: int, body: bytes) -> bytes:
    return ob.object_id(kind, body)


def _held(s: Splitter) -> int:
    """Bytes of container cache keys the splitter holds for its current split (memo and staged entries)."""
    keys = {id(k): k for k in [*s._local, *(k for _, k, _ in s._staged)] if isinstance(k, bytes)}
    return sum(len(k) for k in keys.values())


def _chain(depth: int, bottom: Any) -> Any:
    doc = bottom
    for _ in range(depth):
        doc = {"a": doc}
    return doc


def test_deep_nesting_over_a_big_value_is_not_packed_once_per_level() -> None:
    # before: every level of a chain of one-key objects packed its whole subtree for a cache key and held it
    # until the split ended, 300 levels over 100 KB -> 30 MB (a 10 MB document nested 400 deep: 4 GB)
    bottom = [{f"k{j}": "v" * 1000 for j in range(50)} for _ in range(2)]
    doc = _chain(250, bottom)  # 255 levels at most (MAX_DEPTH: the splitter refuses deeper)
    size = len(msgpack.packb(doc))
    s = Splitter(separate_keys=frozenset())
    root = s.split(doc, _oid)
    assert _held(s) < 20 * size, (_held(s), size)
    assert root.oid == Splitter(0).split(doc, _oid).oid  # the id is the writer policy's, cache or not
    s.keep()
    assert s.split(doc, _oid).oid == root.oid


def test_a_value_bigger_than_the_cache_does_not_empty_it() -> None:
    # before: staging a container whose key alone was over the cache's bound evicted every entry, then itself
    s = Splitter(1 << 20)
    small = {"agent": {"role": "r" * 500, "goal": "g" * 500}}
    s.split({"x": [small]}, _oid)
    s.keep()
    kept = dict(s._cache.d)
    assert kept
    s.split({"y": [{"blob": "b" * 7000} for _ in range(60)] * 1, "z": [[{"q": "w" * 7000}] * 60] * 3}, _oid)
    s.keep()
    assert all(k in s._cache.d for k in kept), "the small entries were evicted by one oversized entry"
    assert s._cache.size <= s._cache.limit


def test_huge_object_keys_are_not_remembered_without_bound() -> None:
    # before: the packed-key memo kept up to 100,000 keys of any length across checkpoints (1,000 keys of
    # 20,000 characters each: 40 MB kept after the documents were gone)
    s = Splitter()
    for n in range(10):
        s.split({f"{n}-{i}-" + "k" * 20_000: i for i in range(100)}, _oid)
        s.keep()
    assert sum(len(k) + len(v) for k, v in s._keys.items()) < 4 << 20


def test_the_long_string_cache_bound_counts_memory_not_characters() -> None:
    # before: a string key counted its characters: strings of 4-byte characters (emoji) held 4x the bound
    import sys

    s = Splitter(4 << 20)
    for n in range(60):
        s.split({"t": f"{n:03d}" + "\U0001F600" * 20_000}, _oid)
        s.keep()
    held = sum(sys.getsizeof(k) + len(v) for k, v in s._strs.d.items())
    assert s._strs.d and held <= s._strs.limit, (held, s._strs.limit)
