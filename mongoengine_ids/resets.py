"""Per-process caches (leased blocks, checked indexes) and how to drop them all at once."""

from __future__ import annotations

from collections.abc import Callable

_reset_callbacks: list[Callable[[], None]] = []


def on_reset(callback: Callable[[], None]) -> Callable[[], None]:
    """Register ``callback`` to drop per-process state (leased blocks, caches) on reset."""
    _reset_callbacks.append(callback)
    return callback


def reset_process_state() -> None:
    """Drop every per-process cache of this package (the test fixtures call it after a test)."""
    for callback in _reset_callbacks:
        callback()
