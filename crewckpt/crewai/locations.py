"""Provider locations: ``"<store location>#<rev>"``, the strings CrewAI's events and ``extract_id`` see."""

from __future__ import annotations

import os

from crewckpt.backends import registry


def split_location(location: str) -> tuple[str, str | None]:
    """Split ``"<store location>#<rev>"`` (the form a CrewckptProvider returns) into ``(location, rev)``.

    A location without ``#`` is a store location with no revision: ``(location, None)``. A URL store ends at
    its first ``#``, a folder path at its last (folder names may hold ``#``).
    """
    return registry.split_rev(str(location))


def join_location(store: str | os.PathLike[str], commit_id: str) -> str:
    """``"<store identity>#<commit id>"`` (the absolute path of a folder store): what CrewAI's events and
    ``extract_id`` see."""
    return f"{registry.identity(store)}#{commit_id}"
