"""Leased counters: :class:`Sequence` and :class:`SequenceField` (:mod:`.field`); listing and
setting the counters (:mod:`.admin`)."""

from __future__ import annotations

from .admin import (
    CounterInfo,
    ShardInfo,
    has_scoped_counters,
    list_counters,
    set_next_value,
    show_counter,
)
from .field import DEFAULT_COLLECTION, Sequence, SequenceField

__all__ = [
    "DEFAULT_COLLECTION",
    "CounterInfo",
    "Sequence",
    "SequenceField",
    "ShardInfo",
    "has_scoped_counters",
    "list_counters",
    "set_next_value",
    "show_counter",
]
