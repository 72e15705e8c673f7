"""Secrets never reach a checkpoint in clear: the CrewAI-facing name of :mod:`crewckpt.views.redaction`.

The logic is pure JSON and lives in the views layer (``ckpt import`` redacts too, without importing
``crewai``); this module re-exports it for the CrewAI integration and existing imports.
"""

from __future__ import annotations

from crewckpt.views.redaction import (
    MIN_SECRET_LEN,
    REDACTED,
    Redactor,
    env_secrets,
    is_secret_key,
    prepare_restore,
)

__all__ = ["MIN_SECRET_LEN", "REDACTED", "Redactor", "env_secrets", "is_secret_key", "prepare_restore"]
