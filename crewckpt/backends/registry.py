"""Store locations: which backend a location string names, and how to open or create the store there.

A location is what a user gives wherever a store is named (``Store.open/init``, ``$CKPT_STORE``,
``ckpt --store``, ``CheckpointConfig(location=...)``, the TUI, import/export, ``restore_from="<store>#rev"``):

* a plain path, or ``sqlite:PATH`` (``sqlite:///abs/path`` also works): the SQLite store in that folder
  (the default). With no location at all, ``$CKPT_STORE``, else the nearest ``.ckpt`` folder walking up from
  the working folder, like git. A leading ``~`` or ``~user`` is expanded as a shell would (a location often
  reaches us unexpanded: ``--store=~/x``, a quoted ``$CKPT_STORE``, a config file); an ``os.PathLike`` is
  taken as it is. A path longer than the system allows is refused with one line;
* ``memory:NAME``: an in-memory store shared by every open of that name in this process (tests, scratch
  work); ``memory:`` alone is a new anonymous store at each open;
* ``scheme://...``: a backend registered for ``scheme``. Known: ``postgresql://`` and ``postgres://`` (extra
  ``crewckpt[postgres]``), ``s3://`` (extra ``crewckpt[s3]``); third-party packages add schemes through the
  ``crewckpt.backends`` entry-point group or :func:`register`.

Only ``word://`` (a word of two or more characters, so ``C://x`` stays a Windows path) and the exact prefixes
``sqlite:`` and ``memory:`` are schemes: a folder named ``x:y`` is a path. A known remote scheme written
without ``//`` (``s3:bucket``) is refused rather than taken as a folder name (write ``./s3:bucket`` for that).

Each location has a canonical identity string (:func:`identity`): the absolute path for SQLite,
``memory:NAME``, the URL for the others. Two spellings of one store have the same identity, and the
identity is itself a location naming that store (``parse(identity(x))`` opens the same store).

A backend plugs in with an :class:`Opener`::

    class PostgresOpener(Opener):
        label = "PostgreSQL"
        def open(self, loc): ...                      # -> Opened(backend, identity); StoreNotFound if none
        def create(self, loc, meta, *, private): ...  # -> Opened; StoreExists if one is there

    OPENER = PostgresOpener()   # in crewckpt/backends/postgres.py: found lazily for postgresql:// and postgres://
    register("myscheme", MyOpener())   # anywhere else, or an entry point in group "crewckpt.backends"
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import re
import threading
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from crewckpt.errors import BackendMissing, BadLocation, CkptError, StoreExists, StoreNotFound

if TYPE_CHECKING:
    from crewckpt.backends.base import Backend

ENV_VAR = "CKPT_STORE"
"""Environment variable naming the store when no location is given."""
ENTRY_POINT_GROUP = "crewckpt.backends"
"""Entry-point group where third-party packages register ``scheme = "module:OPENER"``."""


@dataclasses.dataclass(frozen=True)
class Location:
    """A parsed location.

    scheme: registry key (``"sqlite"``, ``"memory"``, ``"postgresql"``, ``"s3"``...), lower case.
    target: sqlite: the folder path as given (a leading ``~`` expanded); memory: the name (``""`` anonymous); URL schemes: the whole URL
    with its scheme in lower case. text: the string as the user gave it (for messages).
    """

    scheme: str
    target: str
    text: str


@dataclasses.dataclass(frozen=True)
class Opened:
    """An open backend and where it is.

    location: the canonical identity of the store opened (reopening it opens the same store), or None when it
    cannot be reopened (an anonymous memory store). folder: the store folder of a local (SQLite) store as
    found (``Store.path``), else None.
    """

    backend: Backend
    location: str | None
    folder: Path | None = None


class Opener:
    """What a backend registers for its scheme(s). Subclasses implement :meth:`open` and :meth:`create`;
    the other methods have defaults that suit a remote store."""

    label = "crewckpt"
    """Human name of the backend for messages ("SQLite", "PostgreSQL")."""

    def identity(self, loc: Location) -> str:
        """The canonical identity of ``loc`` (no I/O). Default: the URL as given (scheme in lower case), without
        its secrets (:func:`strip_secrets`: an identity is shown and recorded)."""
        return strip_secrets(loc.target)

    def open(self, loc: Location) -> Opened:
        """Open the existing store at ``loc``; never creates anything.

        Raises:
            StoreNotFound: no store there (one line naming it and ``ckpt init``). CkptError subclasses.
        """
        raise NotImplementedError

    def create(self, loc: Location, meta: Mapping[str, str], *, private: bool) -> Opened:
        """Create a store at ``loc`` whose ``meta`` rows are ``meta`` (written with the store, atomically) and
        open it. ``private``: make it readable by this user only, where the backend can.

        Raises:
            StoreExists: a store is already there. CkptError: it cannot be created (one line, with the fix).
        """
        raise NotImplementedError

    def has_store(self, loc: Location) -> bool:
        """Whether a store is at ``loc``, cheaply (no connection); True when that cannot be told without one."""
        return True

    def occupied(self, loc: Location) -> bool:
        """Whether something (a store or anything else) is already at ``loc``, so that creating a store there
        on the fly (``ckpt import`` with no store) would be a surprise. Default: False."""
        return False

    def instance(self, loc: Location) -> Hashable | None:
        """A token that changes when the store at ``loc`` is deleted or replaced (cached handles are dropped
        when it changes); None when there is nothing to compare."""
        return None

    def discover(self) -> Location:
        """The store to open when no location is given at all; only the default (SQLite) backend looks for
        one (the nearest ``.ckpt`` walking up).

        Raises:
            StoreNotFound: none found.
        """
        raise StoreNotFound(f"no store location given; pass one or set {ENV_VAR}")

    def always_new(self, loc: Location) -> bool:
        """True when opening ``loc`` means creating a fresh store (anonymous ``memory:``)."""
        return False


# scheme -> (module defining OPENER, human name, extra to install or None)
_KNOWN: dict[str, tuple[str, str, str | None]] = {
    "sqlite": ("crewckpt.backends.sqlite", "SQLite", None),
    "memory": ("crewckpt.backends.memory", "in-memory", None),
    "postgresql": ("crewckpt.backends.postgres", "PostgreSQL", "postgres"),
    "postgres": ("crewckpt.backends.postgres", "PostgreSQL", "postgres"),
    "s3": ("crewckpt.backends.s3", "S3", "s3"),
    "pg+s3": ("crewckpt.backends.split", "PostgreSQL + S3", "postgres,s3"),
}
_PREFIXES = ("sqlite:", "memory:")  # the only schemes written without "//"
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+)://")  # two characters at least: "C://x" is a drive path
_WORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):")
_MEMORY_NAME = re.compile(r"[A-Za-z0-9._-]*")

_openers: dict[str, Opener] = {}
_lock = threading.Lock()


def register(scheme: str, opener: Opener, *, replace: bool = False) -> None:
    """Make ``scheme://...`` locations open with ``opener`` (call it for each scheme a backend serves).

    Raises:
        ValueError: ``scheme`` is not a URL scheme word, or already registered to another opener and not
        ``replace``.
    """
    key = scheme.lower()
    if not re.fullmatch(r"[a-z][a-z0-9+.-]+", key):
        raise ValueError(f"not a location scheme: {scheme!r} (letters, digits, '+', '.', '-'; two or more)")
    with _lock:
        old = _openers.get(key)
        if old is not None and old is not opener and not replace:
            raise ValueError(f"scheme {key!r} is already registered ({type(old).__name__}); pass replace=True")
        _openers[key] = opener


def schemes() -> list[str]:
    """Every scheme a location may use, as written (``sqlite:``, ``memory:``, ``postgresql://``...)."""
    names = dict.fromkeys([*_KNOWN, *sorted(_openers)])
    return [f"{n}:" if f"{n}:" in _PREFIXES else f"{n}://" for n in names]


def parse(location: str | os.PathLike[str]) -> Location:
    """Parse a location (see the module docstring). An ``os.PathLike`` is always a path. No I/O.

    Raises:
        BadLocation: empty, an unknown ``scheme://``, a bad ``memory:`` name, or a remote scheme without ``//``.
    """
    if isinstance(location, os.PathLike):
        path = str(os.fspath(location))
        return Location("sqlite", _checked_path(path, path), path)
    text = str(location)
    if not text.strip():
        raise BadLocation("the store location is empty; give a folder such as ./.ckpt, or a URL such as "
                          "postgresql://host/db")
    if text.startswith("sqlite:"):
        path = text[len("sqlite:"):]
        path = path[2:] if path.startswith("//") else path  # sqlite:///abs/path, URL style
        if not path:
            raise BadLocation(f"{text!r}: sqlite: needs a folder, e.g. sqlite:./.ckpt")
        return Location("sqlite", _checked_path(os.path.expanduser(path), text), text)
    if text.startswith("memory:"):
        name = text[len("memory:"):]
        if not _MEMORY_NAME.fullmatch(name):
            raise BadLocation(f"{text!r}: a memory store name is letters, digits, '.', '_' and '-' "
                              f"(memory:NAME), or nothing (memory: a new anonymous store)")
        return Location("memory", name, text)
    m = _URL.match(text)
    if m:
        scheme = m.group(1).lower()
        if scheme not in _KNOWN and scheme not in _openers and not _entry_point(scheme):
            raise BadLocation(f"{redact(text)}: unknown store scheme {m.group(1)!r}; locations are a folder path or "
                              f"{', '.join(schemes())}")
        return Location(scheme, scheme + text[len(m.group(1)):], text)
    w = _WORD.match(text)
    scheme = w.group(1).lower() if w else ""
    if scheme and f"{scheme}:" not in _PREFIXES and (scheme in _openers or scheme in _KNOWN):
        raise BadLocation(f"{text}: a {scheme} location is written {scheme}://...; for a local folder of that "
                          f"name write ./{text}")
    return Location("sqlite", _checked_path(os.path.expanduser(text), text), text)


@functools.cache
def _path_limits() -> tuple[int, int]:
    """``(longest folder name, longest path)`` in bytes this system opens (POSIX NAME_MAX, PATH_MAX - 1)."""
    try:
        return os.pathconf("/", "PC_NAME_MAX"), os.pathconf("/", "PC_PATH_MAX") - 1
    except (AttributeError, OSError, ValueError):  # no pathconf (Windows): the common limits
        return 255, 4095


# libpq's secret-bearing keys, and any key whose name says it holds a secret (a third-party backend's token=)
SECRET_KEYS = frozenset({"password", "sslpassword"})
_SECRET_WORDS = ("password", "passwd", "secret", "token", "credential")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://[^\s'\"<>`]+")


def is_secret_key(key: str) -> bool:
    """Whether a location query key carries a secret (its value must never be shown or recorded)."""
    k = key.lower()
    return k in SECRET_KEYS or any(w in k for w in _SECRET_WORDS)


def _query_pairs(query: str) -> list[tuple[str, str, str]]:
    """``(raw pair, decoded key, raw value)`` for each ``&``-separated pair of ``query`` (no decoding errors)."""
    import urllib.parse

    out = []
    for pair in query.split("&") if query else ():
        key, _, value = pair.partition("=")
        out.append((pair, urllib.parse.unquote_plus(key), value))
    return out


def _secretless(text: str, *, drop: bool, nested: bool = False) -> str:
    """``text`` with its secrets masked as ``***`` (``drop=False``) or removed (``drop=True``); see
    :func:`redact`. ``nested``: a URL inside a query value (its whole userinfo is a secret)."""
    import urllib.parse

    m = _URL.match(text)
    if not m:
        return text
    scheme = m.group(1).lower()
    rest = text[m.end():]
    cut = min([i for i in (rest.find(ch) for ch in "/?#") if i != -1], default=len(rest))  # authority's end
    netloc, tail = rest[:cut], rest[cut:]
    user, at, host = netloc.rpartition("@")
    if at:
        name, colon, _pw = user.partition(":")
        if scheme == "s3" or nested:  # an access key pair: both halves are credentials
            netloc = host if drop else f"***@{host}"
        elif colon:
            netloc = f"{name}@{host}" if drop else f"{name}:***@{host}"
    path, hashmark, fragment = tail.partition("#")
    path, qmark, query = path.partition("?")
    if qmark:
        pairs = []
        for pair, key, value in _query_pairs(query):
            inner = urllib.parse.unquote_plus(value)
            if not is_secret_key(key) and "@" in inner and _URL.match(inner):  # endpoint=http://key:secret@host
                pairs.append(f"{pair.partition('=')[0]}={urllib.parse.quote(_secretless(inner, drop=drop, nested=True), safe=':/@*')}")
            elif not is_secret_key(key):
                pairs.append(pair)
            elif not drop:
                pairs.append(f"{pair.partition('=')[0]}=***")
        query = "&".join(pairs)
        qmark = qmark if pairs or not drop else ""
    return f"{text[:m.end()]}{netloc}{path}{qmark}{query}{hashmark}{fragment}"


def redact(text: str, *, nested: bool = False) -> str:
    """``text`` (a location URL) with every secret replaced by ``***``: the password in its userinfo (S3: the
    whole userinfo, an access key pair) and the value of each secret-bearing query key (:func:`is_secret_key`).
    A plain path, or anything that is not ``word://...``, comes back unchanged. ``nested``: mask a URL's whole
    userinfo whatever its scheme (an endpoint). Never raises."""
    return _secretless(text, drop=False, nested=nested)


def scrub(message: str) -> str:
    """``message`` with every URL in it passed through :func:`redact` (the last guard before printing or
    logging an error that may quote a location)."""
    return _URL_IN_TEXT.sub(lambda m: redact(m.group(0)), message)


def strip_secrets(url: str) -> str:
    """``url`` without its secrets at all (the userinfo password and each secret query pair): the form
    recorded as an identity (remotes, trust file); the secret comes from the environment (PGPASSWORD,
    ~/.pgpass, AWS credentials) when the location is used. Never raises."""
    return _secretless(url, drop=True)


def repeated_key(query: str) -> str | None:
    """The first query key given more than once in ``query`` (a later one would silently win), else None."""
    seen: set[str] = set()
    for _pair, key, _v in _query_pairs(query):
        if key in seen:
            return key
        seen.add(key)
    return None


def clip(text: str, keep: int = 60) -> str:
    """``text`` for a one-line message: at most about ``keep`` characters (the middle of a longer one elided)."""
    return text if len(text) <= keep else f"{text[:keep * 2 // 3]}...{text[-(keep // 3):]}"


_ROOM = 32  # bytes the store's own files add below its folder ("/.ckpt/store.db-journal")


def _checked_path(path: str, text: str) -> str:
    """``path``, or BadLocation when it is longer than the system opens (the OS would say only 'File name
    too long', raised from wherever the path is first used)."""
    longest_name, longest_path = _path_limits()
    full = os.fsencode(os.path.abspath(path)) if path else b""
    for sep in (os.sep, os.altsep):
        if sep and sep != "/":  # Windows: both separators
            full = full.replace(os.fsencode(sep), b"/")
    name = max(full.split(b"/"), key=len, default=b"")
    if len(name) > longest_name:
        why = f"a folder name in it is {len(name)} bytes long, more than the {longest_name} this system allows"
    elif len(full) + _ROOM > longest_path:
        why = (f"it is {len(full)} bytes long, and a store folder's path may have {longest_path - _ROOM} at most here "
               f"(the system allows {longest_path}, the files in it need the rest)")
    else:
        return path
    raise BadLocation(f"{clip(text)}: cannot use that path as a store location: {why}; choose a shorter one")


def opener(scheme: str, text: str = "") -> Opener:
    """The opener registered for ``scheme``, importing an in-tree backend or an entry point on first use.

    Raises:
        BackendMissing: a known scheme whose backend (or its driver) is not installed.
        BadLocation: no backend serves ``scheme``.
    """
    got = _openers.get(scheme)
    if got is not None:
        return got
    known = _KNOWN.get(scheme)
    where = redact(text) or f"{scheme}://"
    if known is not None:
        module, label, extra = known
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            if extra is None:
                raise
            why = "" if getattr(e, "name", None) in (module, None) else f" ({e})"  # the driver's name helps
            raise BackendMissing(f"{where}: the {label} backend is not installed{why}; install it with "
                                 f"pip install 'crewckpt[{extra}]'") from None
        found = getattr(mod, "OPENER", None)
        if not isinstance(found, Opener):
            raise BackendMissing(f"{where}: the {label} backend is not available in this crewckpt "
                                 f"({module} has no OPENER); upgrade crewckpt"
                                 + (f" with pip install -U 'crewckpt[{extra}]'" if extra else ""))
        with _lock:
            return _openers.setdefault(scheme, found)
    ep = _entry_point(scheme)
    if ep is not None:
        try:
            found = ep.load()
        except ImportError as e:
            raise BackendMissing(f"{where}: the backend for {scheme}:// ({ep.value}) cannot be loaded ({e}); "
                                 f"reinstall the package that provides it") from None
        found = found() if isinstance(found, type) else found
        if not isinstance(found, Opener):
            raise BackendMissing(f"{where}: entry point {ep.value} is not a crewckpt Opener; fix or uninstall "
                                 f"the package that provides it")
        with _lock:
            return _openers.setdefault(scheme, found)
    raise BadLocation(f"{where}: unknown store scheme {scheme!r}; locations are a folder path or "
                      f"{', '.join(schemes())}")


def _entry_point(scheme: str):  # type: ignore[no-untyped-def]
    """The installed entry point serving ``scheme``, or None (looked at only for schemes not known here)."""
    from importlib.metadata import entry_points

    try:
        found = entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # noqa: BLE001 - a broken distribution's metadata must not break opening stores
        return None
    return next((ep for ep in found if ep.name.lower() == scheme), None)


def _resolve(location: str | os.PathLike[str] | Location) -> tuple[Location, Opener]:
    loc = location if isinstance(location, Location) else parse(location)
    return loc, opener(loc.scheme, loc.text)


def identity(location: str | os.PathLike[str] | Location, *, strict: bool = True) -> str:
    """The canonical identity of a location (see the module docstring); no I/O beyond loading its backend.

    ``strict=False``: a known scheme whose backend is not installed gets the generic URL identity (scheme in
    lower case) instead of BackendMissing, for locations only recorded here (a remote's address).

    Raises:
        BadLocation: a location no backend could serve. BackendMissing: (``strict``) its backend is not installed.
    """
    loc = location if isinstance(location, Location) else parse(location)
    try:
        op = opener(loc.scheme, loc.text)
    except BackendMissing:
        if strict:
            raise
        return Opener().identity(loc)
    return op.identity(loc)


def has_store(location: str | os.PathLike[str] | Location) -> bool:
    """Whether a store is at ``location`` (cheap; True for a remote location, which only opening can tell).

    Raises:
        BadLocation, BackendMissing: a location no installed backend serves.
    """
    loc, op = _resolve(location)
    return op.has_store(loc)


def occupied(location: str | os.PathLike[str] | Location) -> bool:
    """Whether something is already at ``location`` (see :meth:`Opener.occupied`)."""
    loc, op = _resolve(location)
    return op.occupied(loc)


def instance(location: str | os.PathLike[str] | Location) -> Hashable | None:
    """A token that changes when the store at ``location`` is deleted or replaced (see :meth:`Opener.instance`)."""
    loc, op = _resolve(location)
    return op.instance(loc)


def local_folder(location: str | os.PathLike[str] | Location) -> str | None:
    """The folder path of a local (SQLite) location as given, else None. Never raises: a location no backend
    serves is simply not local."""
    try:
        loc = location if isinstance(location, Location) else parse(location)
    except CkptError:
        return None
    return loc.target if loc.scheme == "sqlite" else None


def named(location: str | os.PathLike[str] | None) -> str | os.PathLike[str] | None:
    """The location a user named: ``location``, else ``$CKPT_STORE`` (empty counts as unset), else None."""
    if location is not None:
        return location
    return os.environ.get(ENV_VAR) or None


def open_backend(location: str | os.PathLike[str] | None = None, *, create: bool = False,
                 meta: Mapping[str, str] | None = None, private: bool = True) -> Opened:
    """Open the store at ``location``; None: ``$CKPT_STORE``, else the nearest ``.ckpt`` walking up.

    ``create``: create it (with ``meta`` rows, ``private`` as in :func:`create_backend`) when no store is there;
    of several processes creating one store at once, the losers open the winner's.

    Raises:
        StoreNotFound: no store (and not ``create``). BadLocation, BackendMissing. CkptError subclasses from the
        backend (damaged store, permissions).
    """
    where = named(location)
    if where is None:
        sqlite = opener("sqlite")
        return sqlite.open(sqlite.discover())
    loc, op = _resolve(where)
    if op.always_new(loc):
        return op.create(loc, meta or {}, private=private)
    try:
        return op.open(loc)
    except StoreNotFound:
        if not create:
            raise
    try:
        return op.create(loc, meta or {}, private=private)
    except StoreExists:
        return op.open(loc)  # another process created it meanwhile


def create_backend(location: str | os.PathLike[str], meta: Mapping[str, str], *,
                   private: bool = True) -> Opened:
    """Create a store at ``location`` with ``meta`` rows and open it.

    ``private``: a store only this user can read (SQLite: folder 0700, files 0600); False honours the umask.

    Raises:
        StoreExists: a store is already there. BadLocation, BackendMissing. CkptError: cannot create it.
    """
    loc, op = _resolve(location)
    return op.create(loc, meta, private=private)


def split_rev(text: str) -> tuple[str, str | None]:
    """Split ``"<location>#<rev>"`` into ``(location, rev)``; ``(text, None)`` without ``#``.

    A URL location ends at its first ``#`` (a URL's own ``#`` is percent-encoded), so a revision after it may
    hold ``#`` too; a folder name may hold ``#``, so a path splits at the last one. An empty revision is None.
    """
    if _URL.match(text):
        path, sep, rev = text.partition("#")
    else:
        path, sep, rev = text.rpartition("#")
    if not sep:
        return text, None
    return path, rev or None


__all__ = [
    "ENV_VAR", "BackendMissing", "BadLocation", "Location", "Opened", "Opener", "clip", "create_backend", "has_store",
    "identity", "instance", "local_folder", "named", "occupied", "open_backend", "opener", "parse", "register",
    "schemes", "split_rev", "redact", "scrub", "strip_secrets", "is_secret_key", "repeated_key",
]
