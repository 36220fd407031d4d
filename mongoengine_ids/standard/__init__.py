"""Standard RFC 9562 UUIDs: the UUIDv4 and UUIDv7 fields and the UUIDv7 generator."""

from __future__ import annotations

from .fields import UUID4Field, UUID7Field, UUID7Generator, uuid7_timestamp_ms

__all__ = ["UUID4Field", "UUID7Field", "UUID7Generator", "uuid7_timestamp_ms"]
