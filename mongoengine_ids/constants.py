"""Every bit width, step and limit of the id layouts, and the names modules share, in one place.

The Locality UUID layout is fixed by ``shared/spec/locality-uuid.md`` (Groupon's format)::

    bytes 0-3    counter      32 bits  (spread mode: hex digits reversed)
    bytes 4-5    process id   16 bits  (pid mod 65536)
    byte 6 high  version       4 bits  (always 0xb)
    byte 6 low,  node         28 bits  (low 28 bits of the MAC)
      bytes 7-9
    bytes 10-15  time         48 bits  (Unix epoch milliseconds, UTC)
"""

from __future__ import annotations

from typing import Final

# -- Locality UUID -----------------------------------------------------------------------------

LOCALITY_COUNTER_BITS: Final = 32
LOCALITY_PID_BITS: Final = 16
LOCALITY_VERSION_BITS: Final = 4
LOCALITY_NODE_BITS: Final = 28
LOCALITY_TIME_BITS: Final = 48

LOCALITY_TIME_SHIFT: Final = 0
LOCALITY_NODE_SHIFT: Final = LOCALITY_TIME_SHIFT + LOCALITY_TIME_BITS  # 48
LOCALITY_VERSION_SHIFT: Final = LOCALITY_NODE_SHIFT + LOCALITY_NODE_BITS  # 76
LOCALITY_PID_SHIFT: Final = LOCALITY_VERSION_SHIFT + LOCALITY_VERSION_BITS  # 80
LOCALITY_COUNTER_SHIFT: Final = LOCALITY_PID_SHIFT + LOCALITY_PID_BITS  # 96

LOCALITY_COUNTER_MASK: Final = (1 << LOCALITY_COUNTER_BITS) - 1
LOCALITY_PID_MASK: Final = (1 << LOCALITY_PID_BITS) - 1
LOCALITY_VERSION_MASK: Final = (1 << LOCALITY_VERSION_BITS) - 1
LOCALITY_NODE_MASK: Final = (1 << LOCALITY_NODE_BITS) - 1
LOCALITY_TIME_MASK: Final = (1 << LOCALITY_TIME_BITS) - 1

LOCALITY_VERSION: Final = 0xB
MAC_BITS: Final = 48
MAC_MASK: Final = (1 << MAC_BITS) - 1
#: In the first octet: the multicast bit (set by uuid.getnode() on its random fallback) and the
#: locally-administered bit (set on the made-up MACs of containers and virtual machines).
MAC_MULTICAST_BIT: Final = 1 << 40
MAC_LOCAL_BIT: Final = 1 << 41

#: Spread mode ("variable" in the original library): odd, so the counter visits all 2**32 values
#: before it repeats.
SPREAD_STEP: Final = 0x0BD4BCB5
SEQUENTIAL_STEP: Final = 1

#: Environment variable that overrides the MAC address (containers often have random or
#: identical ones). Accepts ``aa:bb:cc:dd:ee:ff``, ``aa-bb-cc-dd-ee-ff`` or 12 hex digits.
MAC_ENV_VAR: Final = "MONGOENGINE_IDS_MAC"

# -- counters ---------------------------------------------------------------------------------

#: MongoEngine's counter collection (``mongoengine.fields.SequenceField.COLLECTION_NAME``), the
#: default of this package's ``SequenceField`` too.
COUNTERS_COLLECTION: Final = "mongoengine.counters"

# -- BSON --------------------------------------------------------------------------------------

#: BSON Binary subtype of an RFC 4122 / standard-order UUID.
BSON_UUID_SUBTYPE: Final = 4
UUID_BYTES: Final = 16
UUID_HEX_DIGITS: Final = 32
