"""Which remotes this machine's user added: a store's remote config travels with the store, so it is data.

A store copied from someone else (a folder, a CI artifact, a clone source's own config) may name a remote
the user never chose: ``ckpt fetch`` would then connect there with the user's credentials (``PGPASSWORD``,
AWS keys) and ``ckpt push`` would send checkpoints there. So a remote is used by name only when this
machine's user trust file lists the same (store, remote name, location) triple: ``ckpt remote add`` and
``ckpt clone`` record it, ``ckpt remote trust NAME`` records one that came with a store. A store that moved
to another folder has another identity and asks again (git's ``safe.directory`` has the same shape).

The file is ``$CKPT_CONFIG_HOME/trusted-remotes.json`` (else ``$XDG_CONFIG_HOME/crewckpt/``, else
``~/.config/crewckpt/``): ``{store identity: {remote name: location}}``, written atomically under a file lock.
Stores without a lasting identity (``memory:`` stores live in one process) need no entry.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import orjson
from filelock import FileLock

FILE = "trusted-remotes.json"


def config_dir() -> Path:
    """The folder of the user's crewckpt configuration (see the module docstring)."""
    if os.environ.get("CKPT_CONFIG_HOME"):
        return Path(os.environ["CKPT_CONFIG_HOME"])
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "crewckpt"


def _needs_trust(store_id: str | None) -> bool:
    return store_id is not None and not store_id.startswith("memory:")


def _load(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): {str(n): str(loc) for n, loc in v.items()} for k, v in data.items() if isinstance(v, dict)}


def trusted(store_id: str | None, name: str, location: str) -> bool:
    """Whether this user added (or trusted) remote ``name`` at ``location`` for the store ``store_id``."""
    if not _needs_trust(store_id):
        return True
    return _load(config_dir() / FILE).get(str(store_id), {}).get(name) == location


def record(store_id: str | None, name: str, location: str | None) -> None:
    """Trust remote ``name`` at ``location`` for ``store_id`` (None ``location``: forget the name).

    Raises:
        OSError: the configuration folder cannot be written (the message names it).
    """
    if not _needs_trust(store_id):
        return
    folder = config_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FILE
    with FileLock(str(path) + ".lock", timeout=30):
        data = _load(path)
        entry = data.setdefault(str(store_id), {})
        if location is None:
            entry.pop(name, None)
        else:
            entry[name] = location
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".trusted-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(orjson.dumps(data, option=orjson.OPT_INDENT_2))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
