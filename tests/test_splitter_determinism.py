"""A document's tree id depends only on the document and the split hints, never on what the writer's caches
hold (objects_format.md 4.1: caches "never affect ids"). Dedup across writers and "write again -> same id"
rest on it: the same document committed from a fresh process and from one whose splitter is warm (it split
the same sub-values before, under other keys or as pieces) must give the same tree and commit ids."""

from __future__ import annotations

import collections
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crewckpt import Frozen, Store
from crewckpt.format import objects as ob
from crewckpt.history.profile import Profile
from crewckpt.history.snapshot import Parts, Splitter

HINTS = frozenset({"agent", "text"})

# a small pool of sub-values so the same value keeps turning up in different places: under a hint key (its
# own tree once over 256 bytes), under a plain key (inline), as a piece of a Parts value (a leaf tree)
SMALL = {"role": "r" * 40}
MID = {"role": "r" * 300, "n": [1, 2, 3]}  # over 256 bytes, under 8192: inline or own tree by its key
NESTED = {"x": MID, "agent": {"goal": "g" * 280}}
ARR = [MID, "s" * 300, 7]
TEXT = "t" * 400  # a string blob under a hint key, inline elsewhere
POOL: list[Any] = [SMALL, MID, NESTED, ARR, TEXT, 1, None]
KEYS = ["agent", "text", "a", "b"]


def _oid(kind: int, body: bytes) -> bytes:
    return ob.object_id(kind, body)


class _Forgetful(dict):  # type: ignore[type-arg]
    """A memo that remembers nothing."""

    def __setitem__(self, k: Any, v: Any) -> None:
        pass


def uncached(doc: Any, hints: frozenset[str] = HINTS) -> bytes:
    """The root id of ``doc`` split with every cache off, the per-split memo too: the writer policy alone."""
    s = Splitter(0, separate_keys=hints)
    s._local = _Forgetful()
    s.inline_ok = False  # the walk alone, value by value: the reference the shortcut must match
    return s.split(doc, _oid).oid


def fresh(doc: Any) -> bytes:
    """The root id a new splitter gives ``doc``; checked against :func:`uncached` (the policy alone)."""
    got = Splitter(separate_keys=HINTS).split(doc, _oid).oid
    assert got == uncached(doc)
    return got


def warm(docs: list[Any], splitter: Splitter | None = None) -> list[bytes]:
    """Root ids of ``docs`` split one after another by one splitter, keeping its caches (as a store does)."""
    s = splitter or Splitter(separate_keys=HINTS)
    out = []
    for d in docs:
        out.append(s.split(d, _oid).oid)
        s.keep()
    return out


def bare(v: Any) -> Any:
    """The plain JSON value of ``v`` with every Frozen unwrapped (Parts kept: they shape the graph)."""
    while isinstance(v, Frozen):
        v = v.value
    if isinstance(v, Parts):
        return Parts([bare(p) for p in v.pieces], array=v.array, join=v.join)
    if isinstance(v, dict):
        return {k: bare(x) for k, x in v.items()}
    if isinstance(v, list):
        return [bare(x) for x in v]
    return v


def test_a_value_seen_under_a_plain_key_first_is_still_its_own_tree_under_a_hint_key() -> None:
    # before: the container cache (msgpack bytes -> representation) returned MID's inline body from the first
    # document for the second, so {"agent": MID} had one id from a fresh writer and another from a warm one
    assert warm([{"a": MID}, {"agent": MID}]) == [fresh({"a": MID}), fresh({"agent": MID})]
    assert warm([{"agent": MID}, {"a": MID}]) == [fresh({"agent": MID}), fresh({"a": MID})]
    # and inside one document (the per-split memo): whichever key comes first
    for doc in ({"a": MID, "agent": MID}, {"agent": MID, "a": MID}):
        s = Splitter(separate_keys=HINTS)
        ids = [s.split(doc, _oid).oid for _ in range(2)]
        assert ids == [fresh(doc)] * 2 == [Splitter(separate_keys=HINTS).split(orjson.loads(orjson.dumps(doc)),
                                                                                _oid).oid] * 2


def test_a_piece_seen_first_does_not_turn_the_same_plain_value_into_a_link() -> None:
    piece = {"p": 1, "q": "z" * 20}
    docs = [Parts([piece, {"c": 2}]), {"k": piece}]
    assert warm(docs) == [fresh(d) for d in docs]
    assert warm(docs[::-1]) == [fresh(d) for d in docs[::-1]]


def test_a_frozen_value_is_only_a_cache_and_follows_the_split_hints() -> None:
    # a Frozen container under a hint key is its own tree as the plain value is; one Frozen object used under a
    # hint key and under a plain key (or as a piece) gets each place's representation
    f, t = Frozen(MID), Frozen(TEXT)
    docs = [{"a": f, "x": t}, {"agent": f, "text": t}, Parts([f, {"z": 1}]), {"b": [f], "agent": f, "text": t}]
    want = [fresh(bare(d)) for d in docs]
    assert warm(docs) == want
    assert warm(docs[::-1]) == want[::-1]
    assert [fresh(d) for d in docs] == want


def test_append_map_groups_give_the_ids_a_fresh_writer_gives() -> None:
    from crewckpt.history.snapshot import AppendMap

    log = AppendMap(piece_entries=2, group_pieces=2)
    docs = []
    for i in range(24):
        log.set(f"e{i}", Frozen(MID if i % 3 else {"i": i}))
        if i % 4 == 3:
            log.set("e1", Frozen({"i": -i}))  # an old entry: its piece and its group change
        docs.append({"nodes": log.parts(), "step": i})
    assert warm(docs) == [fresh(d) for d in docs] == [fresh(bare(d)) for d in docs]


def _doc(draw: Any, depth: int = 0) -> Any:
    """A random document made of POOL values (some Frozen, shared between documents) under random keys."""
    n = draw(st.integers(0, 4))
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=n, max_size=n, unique=True))
    out: dict[str, Any] = {}
    for k in keys:
        kind = draw(st.integers(0, 5 if depth < 2 else 3))
        if kind <= 2:
            out[k] = draw(st.sampled_from(POOL))
        elif kind == 3:
            out[k] = draw(st.sampled_from(FROZEN))
        elif kind == 4:
            out[k] = _doc(draw, depth + 1)
        else:
            out[k] = [_doc(draw, depth + 1), draw(st.sampled_from(POOL))]
    return out


FROZEN = [Frozen(v) for v in POOL if isinstance(v, (dict, list, str))]


@st.composite
def documents(draw: Any) -> list[Any]:
    docs = [_doc(draw) for _ in range(draw(st.integers(1, 6)))]
    if draw(st.booleans()):  # a Parts value whose pieces are pool values (leaves) seen elsewhere as plain values
        pieces = draw(st.lists(st.sampled_from([SMALL, MID, NESTED, FROZEN[0], FROZEN[1]]), min_size=1,
                               max_size=3, unique_by=id))
        docs.insert(draw(st.integers(0, len(docs))), {"log": Parts(pieces)})
    return docs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(), st.randoms(use_true_random=False))
def test_ids_do_not_depend_on_the_cache_or_the_order_of_commits(docs: list[Any], rnd: Any) -> None:
    want = [fresh(bare(d)) for d in docs]  # no Frozen at all, an empty cache per document
    assert [fresh(d) for d in docs] == want  # Frozen is a cache, never a different tree
    assert warm(docs) == want
    order = list(range(len(docs)))
    rnd.shuffle(order)
    again = warm([docs[i] for i in order] + docs)  # another history first, then every document again
    assert again == [want[i] for i in order] + want


def test_the_same_document_has_the_same_commit_id_in_a_fresh_and_a_warm_store() -> None:
    profile = Profile(name="test", summarize=lambda doc: {}, separate_keys=HINTS)
    doc = {"tasks": [{"agent": MID, "out": SMALL}], "text": TEXT}

    def commit(store: Store) -> str:
        return store.commit(doc, parents=[], run_id="r1", time_ns=1_000, branch="main")

    cold = commit(Store.memory(profile=profile))
    busy = Store.memory(profile=profile)
    busy.commit({"seen": MID, "piece": Parts([MID]), "x": TEXT}, branch="other", run_id="r0")
    assert commit(busy) == cold
    assert busy.info(cold).tree == fresh(doc).hex()


# -- the inline shortcut (Splitter._inline): a container's msgpack bytes taken as its representation without
# walking it must be exactly what the walk makes, and must never let through what the walk refuses


class _Str(str):
    pass


_SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8), st.text(min_size=60, max_size=80), st.sampled_from(["é" * 70, "x" * 257, "y" * 256,
                                                                            "z" * 3000, "w" * 8200, "\ud800"]),
)
_KEY = st.sampled_from(["agent", "text", "a", "b", "c", "event", "é"])


def _json_values() -> Any:
    return st.recursive(
        _SCALAR,
        lambda kids: st.one_of(st.lists(kids, max_size=6), st.dictionaries(_KEY, kids, max_size=5),
                               st.lists(kids, max_size=6).map(tuple)),
        max_leaves=40)


def _shortcut_and_walk(doc: Any, hints: frozenset[str] = HINTS) -> tuple[Any, Any]:
    """(root id or the error's type, with the shortcut) and the same for the walk alone (uncached)."""
    out: list[Any] = []
    for inline in (True, False):
        s = Splitter(separate_keys=hints) if inline else Splitter(0, separate_keys=hints)
        s.inline_ok = inline
        if not inline:
            s._local = _Forgetful()
        try:
            out.append(s.split(doc, _oid).oid)
        except (TypeError, ValueError) as e:
            out.append(type(e))
    return out[0], out[1]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_json_values(), st.sampled_from([HINTS, frozenset()]))
def test_the_inline_shortcut_makes_the_ids_and_errors_of_the_walk(value: Any, hints: frozenset[str]) -> None:
    doc = {"k": value, "l": [value, {"agent": value}], "f": Frozen(value) if isinstance(value, (dict, list)) else 1,
           "p": Parts([value, Frozen(value)], array=True) if isinstance(value, list) else 2}
    with_shortcut, walk = _shortcut_and_walk(doc, hints)
    assert with_shortcut == walk


def _chain(depth: int) -> Any:
    v: Any = 1
    for _ in range(depth):
        v = {"a": v}
    return v


def test_the_inline_shortcut_keeps_the_walks_depth_size_and_width_limits() -> None:
    from crewckpt.history.snapshot import CHUNK_ENTRIES, INLINE_MAX, MAX_INLINE_DEPTH, SEPARATE_MIN
    cases = [
        _chain(MAX_INLINE_DEPTH - 1), _chain(MAX_INLINE_DEPTH), _chain(MAX_INLINE_DEPTH + 1),  # height limit
        list(range(CHUNK_ENTRIES)), list(range(CHUNK_ENTRIES + 1)), {"x": list(range(CHUNK_ENTRIES + 1))},  # width
        ["s" * (INLINE_MAX - 8)], ["s" * (INLINE_MAX - 4)], ["s" * (INLINE_MAX - 2)],  # body size at the limit
        {"agent": "a" * SEPARATE_MIN}, {"agent": "a" * (SEPARATE_MIN + 1)}, {"agent": "é" * 129},  # hint key
        {"agent": ["a" * (SEPARATE_MIN - 4)]}, {"agent": ["a" * (SEPARATE_MIN - 2)]}, {"agent": {"b": "c" * 250}},
        {"b": {"agent": "a" * 300}}, [{"text": "t" * 300}], {"b": "agent" * 60},  # a hint key's bytes as a value
        {"n": float("nan")}, {"n": [float("inf")]}, {"n": -0.0}, {1: 2}, {"b": {2: 3}}, {"b": 2**64}, {"s": "\udc80"},
        {"s": _Str("x")}, collections.OrderedDict([("b", 1), ("a", 2)]), [True, 1, 1.0], ((1, 2), [3]),
    ]
    for value in cases:
        for doc in ({"k": value}, {"agent": value}, {"k": Frozen(value)}, {"agent": Frozen(value)},
                    {"k": [Frozen(value), value]}):
            with_shortcut, walk = _shortcut_and_walk(doc)
            assert with_shortcut == walk, (doc, with_shortcut, walk)


def test_the_inline_shortcut_is_taken_for_plain_small_containers() -> None:
    """It is not a check that never fires: a plain small container is not walked value by value."""
    calls = []
    s = Splitter(separate_keys=HINTS)
    real = s._inline

    def spy(v: Any, packed: bytes, own: bool) -> Any:
        got = real(v, packed, own)
        calls.append(got is not None)
        return got
    s._inline = spy  # type: ignore[method-assign]
    s.split({"k": {"a": 1, "b": [1, 2, {"c": "d"}]}, "agent": {"x": "short"}}, _oid)
    assert calls and all(calls)
