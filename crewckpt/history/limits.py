"""Bounds on what reading one document may cost, so a hostile store cannot exhaust memory or time.

A store is data someone else may have written. Three things bound a read of one checkpoint:

* ``max_bytes``: bytes decompressed (every frame is bounded by its declared size, and the declared sizes
  of the frames one read decodes add up to at most this), and bytes of the expanded document's strings;
* ``max_nodes``: JSON values (containers and scalars) in the expanded document: a tree that links one
  subtree many times is counted as expanded, before anything is built;
* ``MAX_DEPTH``: container nesting (orjson, which writes every JSON the CLI prints, stops at 255).

Defaults are far above CrewAI checkpoints (a few MB, well under 1M values); ``$CKPT_MAX_READ_BYTES`` and
``$CKPT_MAX_READ_NODES`` raise them for every read, ``Store.read(max_bytes=..., max_nodes=...)`` for one.
"""

from __future__ import annotations

import os

from crewckpt.errors import DocumentTooLarge

MAX_READ_BYTES = 512 << 20
MAX_READ_NODES = 5_000_000
MAX_DEPTH = 255
"""Deepest container nesting a document may have (commit refuses deeper; read refuses deeper)."""

ENV_BYTES = "CKPT_MAX_READ_BYTES"
ENV_NODES = "CKPT_MAX_READ_NODES"


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or len(text) > 18:
        raise DocumentTooLarge(f"${name}={text[:30]!r} is not a positive whole number; unset it or give e.g. "
                               f"{default}")
    return int(text)


class ReadBudget:
    """What one read may still spend. ``charge_bytes`` raises DocumentTooLarge once over ``max_bytes``.

    Args:
        max_bytes: bytes (decompressed frames plus expanded strings); None: ``$CKPT_MAX_READ_BYTES`` or
            MAX_READ_BYTES.
        max_nodes: JSON values in the expanded document; None: ``$CKPT_MAX_READ_NODES`` or MAX_READ_NODES.
        what: how errors name the document (``checkpoint 1a2b3c4d5e6f``).
        doing: what the refused operation is, for errors ("read", "fetch": "... is too large to fetch").
        kwargs: whether the caller takes ``max_bytes=``/``max_nodes=`` (errors offer them beside the variables).
    """

    def __init__(self, max_bytes: int | None = None, max_nodes: int | None = None,
                 what: str = "the document", *, doing: str = "read", kwargs: bool = True) -> None:
        for name, v in (("max_bytes", max_bytes), ("max_nodes", max_nodes)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
                raise TypeError(f"{name} must be an int or None, got {type(v).__name__}")
        self.max_bytes = _env_int(ENV_BYTES, MAX_READ_BYTES) if max_bytes is None else max_bytes
        self.max_nodes = _env_int(ENV_NODES, MAX_READ_NODES) if max_nodes is None else max_nodes
        self.what = what
        self.doing = doing
        self.kwargs = kwargs
        self.used_bytes = 0

    def charge_bytes(self, n: int) -> None:
        """Account ``n`` more bytes about to be decompressed. Raises DocumentTooLarge (nothing is decoded)."""
        self.used_bytes += max(n, 0)
        if self.used_bytes > self.max_bytes:
            raise self.too_large(f"more than {self.max_bytes} bytes to decompress", ENV_BYTES, "max_bytes")

    def charge_object(self, oid: bytes, n: int) -> None:
        """Account object ``oid`` whose frame declares ``n`` body bytes, before decompressing it."""
        self.charge_bytes(n)

    def check_expanded(self, nodes: int, nbytes: int, depth: int) -> None:
        """Refuse an expanded document of ``nodes`` values, ``nbytes`` string bytes, ``depth`` levels."""
        if depth > MAX_DEPTH:
            raise DocumentTooLarge(f"{self.what} is nested {depth} levels deep, deeper than the {MAX_DEPTH} "
                                   f"crewckpt reads; the store holds a document no JSON tool can print")
        if nodes > self.max_nodes:
            raise self.too_large(f"{nodes} JSON values once expanded (limit {self.max_nodes})", ENV_NODES,
                                 "max_nodes")
        if nbytes + self.used_bytes > self.max_bytes:
            raise self.too_large(f"{nbytes + self.used_bytes} bytes once expanded (limit {self.max_bytes})",
                                 ENV_BYTES, "max_bytes")

    def too_large(self, why: str, env: str, kwarg: str) -> DocumentTooLarge:
        """The one-line error naming the limit passed (``why``) and how to raise it."""
        alt = f" (or Store.read(..., {kwarg}=N))" if self.kwargs else ""
        return DocumentTooLarge(f"{self.what} is too large to {self.doing}: {why}; if you trust this store, raise "
                                f"the limit with ${env}{alt}")


class ObjectBound(ReadBudget):
    """A bound on each object's declared body size, not a running total: for verbs that decode objects one at
    a time and keep none (fsck, gc's mark). An object over it is refused before anything is decompressed, so a
    small frame declaring a huge body costs neither memory nor time. ``max_bytes``: as for ReadBudget."""

    def charge_object(self, oid: bytes, n: int) -> None:
        """Raise DocumentTooLarge (naming ``oid`` and its declared ``n`` bytes) when ``n`` is over the bound."""
        if n > self.max_bytes:
            raise DocumentTooLarge(f"object {oid.hex()} declares {n} bytes, more than the read limit of "
                                   f"{self.max_bytes} bytes; if you trust this store, raise the limit with "
                                   f"${ENV_BYTES}")
