"""Secrets never reach a checkpoint in clear.

CrewAI copies provider keys from the environment into its LLM objects (``OPENAI_API_KEY`` ->
``OpenAICompletion.api_key``) and its state dump includes them. When crewckpt builds a checkpoint from a live
run (:mod:`crewckpt.crewai.snapshot`) and when ``ckpt import`` reads a CrewAI file or row
(:mod:`crewckpt.views.importer`):

* the string value of every **secret-named key** (``api_key``, ``x-api-key``, ``*_token``, ``password``,
  ``secret``, ``client_secret``, ``*_access_key``, ``private_key``, ``authorization``, ``cookie``,
  ``credentials``; case and ``-``/``_`` ignored; counts such as ``max_tokens`` are not strings and not
  matched) becomes :data:`REDACTED`;
* any occurrence, in any string, of the value of a **secret environment variable** (a name with
  ``API_KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``ACCESS_KEY``, ``PRIVATE_KEY``, ``CREDENTIALS``; values of
  8 characters or more) becomes ``[redacted:NAME]`` (e.g. a key echoed into a task output or a header).

On restore, :func:`prepare_restore` removes every secret-named key holding :data:`REDACTED`, so CrewAI builds
the value as it does at construction: from the environment (``OpenAICompletion`` reads ``OPENAI_API_KEY``,
Anthropic, Azure and Gemini theirs) or the field's default. A checkpoint can never ask for an environment
variable by name: ``[redacted:NAME]`` stays text.

Pure JSON, no ``crewai`` import (the views use it; :mod:`crewckpt.crewai.secrets` re-exports it). Deterministic:
the same value and the same environment give the same result, and redacting twice changes nothing more.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_LEN = 8

_SECRET_KEY = re.compile(
    r"(?:^|_)(?:api_?key|access_?key|secret_?key|private_?key|secret|token|password|passwd|authorization|"
    r"credentials?|cookie)$")
# a cheap pre-filter over compact JSON (pydantic's, orjson's), lowercased: a key ending in a secret word, then
# a string value (0.4 ms for a 50 KB entity, against 0.8 ms to parse it)
_NEEDLES = tuple(f'{w}":"' for w in ("key", "token", "secret", "password", "passwd", "authorization",
                                     "credential", "credentials", "cookie"))
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SECRET_ENV = re.compile(r"(?:^|_)(?:API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|ACCESS_KEY|PRIVATE_KEY|"
                         r"CREDENTIALS?)(?:_|$)")


def is_secret_key(key: str) -> bool:
    """True for a dict key / field name that holds a secret (``api_key``, ``X-Api-Key``, ``access_token``)."""
    return bool(_SECRET_KEY.search(_CAMEL.sub("_", key).lower().replace("-", "_")))


def env_secrets(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """``(value, NAME)`` of the secret-looking environment variables, longest value first."""
    env = os.environ if environ is None else environ
    found = {v: k for k, v in env.items() if len(v) >= MIN_SECRET_LEN and _SECRET_ENV.search(k.upper())}
    return sorted(found.items(), key=lambda kv: -len(kv[0]))


class Redactor:
    """Redacts checkpoints' dumped values in place (see the module docstring).

    ``redacted`` counts the values changed so far (a secret-named key's string, a string holding a secret
    environment value), over every :meth:`apply` call; a value already :data:`REDACTED` is not counted.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.secrets = env_secrets(environ)
        self.redacted = 0

    def needed(self, text: str) -> bool:
        """Whether a JSON text may hold something to redact (fast, over-approximating; spaced JSON: always)."""
        if '": "' in text or any(v in text for v, _ in self.secrets):
            return True
        low = text.lower()
        return any(n in low for n in _NEEDLES)

    def _text(self, s: str) -> str:
        found = False
        for value, name in self.secrets:
            if value in s:
                s = s.replace(value, f"[redacted:{name}]")
                found = True
        self.redacted += found
        return s

    def apply(self, value: Any, text: str | None = None) -> Any:
        """Redact ``value`` (a JSON value: dicts and lists are changed in place); returns it.

        ``text``: its JSON encoding when at hand, to skip values with nothing to redact cheaply.
        """
        if text is not None and not self.needed(text):
            return value
        if isinstance(value, str):
            return self._text(value)
        stack = [value]
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                for k, child in v.items():
                    if isinstance(child, str):
                        if child and isinstance(k, str) and is_secret_key(k):
                            if child != REDACTED:
                                v[k] = REDACTED
                                self.redacted += 1
                        elif self.secrets:
                            v[k] = self._text(child)
                    elif isinstance(child, (dict, list)):
                        stack.append(child)
            elif isinstance(v, list):
                for i, child in enumerate(v):
                    if isinstance(child, str):
                        if self.secrets:
                            v[i] = self._text(child)
                    elif isinstance(child, (dict, list)):
                        stack.append(child)
        return value


def prepare_restore(doc: Any) -> Any:
    """Remove secret-named keys holding :data:`REDACTED` (in place) so CrewAI rebuilds them from the
    environment or their default, as when the object was first built; returns ``doc``."""
    stack = [doc]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            drop = [k for k, child in v.items()
                    if child == REDACTED and isinstance(k, str) and is_secret_key(k)]
            for k in drop:
                del v[k]
            stack.extend(c for c in v.values() if isinstance(c, (dict, list)))
        elif isinstance(v, list):
            stack.extend(c for c in v if isinstance(c, (dict, list)))
    return doc
