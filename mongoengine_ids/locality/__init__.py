"""Locality UUIDs: the value and its generator (:mod:`.generator`), the field (:mod:`.field`).

:mod:`.field` also holds :class:`UUIDValueField`, the base of every UUID field of the package
(the standard UUIDv4 and UUIDv7 fields included).
"""

from __future__ import annotations

from .field import LocalityUUIDField, UUIDValueField
from .generator import LocalityUUID, LocalityUUIDGenerator

__all__ = ["LocalityUUID", "LocalityUUIDField", "LocalityUUIDGenerator", "UUIDValueField"]
