"""Per-process caches (leased blocks, checked indexes) and how to drop them all at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_reset_callbacks: list[Callable[[], None]] = []
_drop_callbacks: list[Callable[[Any, str], None]] = []


def on_reset(callback: Callable[[], None]) -> Callable[[], None]:
    """Register ``callback`` to drop per-process state (leased blocks, caches) on reset."""
    _reset_callbacks.append(callback)
    return callback


def reset_process_state() -> None:
    """Drop every per-process cache of this package (the test fixtures call it after a test)."""
    for callback in _reset_callbacks:
        callback()


def on_drop(callback: Callable[[Any, str], None]) -> Callable[[Any, str], None]:
    """Register ``callback(database, name)`` to drop what is cached of a collection that a
    model's ``drop_collection()`` dropped (its indexes went with it)."""
    _drop_callbacks.append(callback)
    return callback


def collection_dropped(database: Any, name: str) -> None:
    """A model's ``drop_collection()`` dropped collection ``name`` of ``database``."""
    for callback in _drop_callbacks:
        callback(database, name)
