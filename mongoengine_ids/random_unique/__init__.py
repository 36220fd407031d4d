"""Random ids retried on collision: :class:`RandomUniqueField` (:mod:`.field`); the value
spaces and buffered randomness it draws from (:mod:`.space`)."""

from __future__ import annotations

from .field import RandomFieldStats, RandomUniqueField
from .space import ValueSpace

__all__ = ["RandomFieldStats", "RandomUniqueField", "ValueSpace"]
