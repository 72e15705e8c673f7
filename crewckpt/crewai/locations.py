"""Provider locations: ``"<store path>#<rev>"``, the strings CrewAI's events and ``extract_id`` see."""

from __future__ import annotations

import os


def split_location(location: str) -> tuple[str, str | None]:
    """Split ``"<store path>#<rev>"`` (the form a CrewckptProvider returns) into ``(path, rev)``.

    A location without ``#`` is a store path with no revision: ``(location, None)``.
    """
    path, sep, rev = str(location).rpartition("#")
    if not sep:
        return str(location), None
    return path, rev or None


def join_location(store_path: str | os.PathLike[str], commit_id: str) -> str:
    """``"<absolute store path>#<commit id>"``: what CrewAI's events and ``extract_id`` see."""
    return f"{os.path.abspath(store_path)}#{commit_id}"
