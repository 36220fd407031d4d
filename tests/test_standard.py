"""Standard UUID fields: version 4 and the monotonic version 7 generator."""

from __future__ import annotations

import os
import re
import select
import threading
import uuid
from typing import Any

import mongoengine as me
import pytest
from _write_support import raw_collection
from bson.binary import Binary
from mongoengine.errors import ValidationError

from mongoengine_ids import InvalidIdError, LocalityUUIDField
from mongoengine_ids.resets import reset_process_state
from mongoengine_ids.standard import UUID4Field, UUID7Field, UUID7Generator, uuid7_timestamp_ms
from mongoengine_ids.testing import Connect

T = 1_700_000_000_123


def counting_random() -> Any:
    """Deterministic 'random' bytes: 0x00.., 0x01.., ... so the counter seeds are known."""
    state = {"n": 0}

    def random_bytes(n: int) -> bytes:
        state["n"] += 1
        return bytes([state["n"] % 256]) * n

    return random_bytes


def test_layout_version_variant_and_time() -> None:
    value = UUID7Generator(clock=lambda: T).generate()
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert uuid7_timestamp_ms(value) == T
    assert value.int >> 80 == T


def test_counter_seeded_then_incremented_within_a_millisecond() -> None:
    generator = UUID7Generator(clock=lambda: T, random_bytes=counting_random())
    first, second = generator.generate(), generator.generate()
    # Each call reads its ids' low 32 random bits first (0x01.., then 0x03..); a new
    # millisecond then reads 6 bytes (0x02..) for the counter's seed, top bit cleared.
    counter = int.from_bytes(b"\x02" * 6, "big") & ((1 << 41) - 1)

    assert counter_of(first) == counter
    assert counter_of(second) == counter + 1
    assert first.int & 0xFFFFFFFF == 0x01010101
    assert second.int & 0xFFFFFFFF == 0x03030303
    assert first < second


def counter_of(value: uuid.UUID) -> int:
    return (((value.int >> 64) & 0xFFF) << 30) | ((value.int >> 32) & ((1 << 30) - 1))


def test_generate_many_goes_on_as_many_generate_calls_would() -> None:
    readings: list[int] = []

    def clock() -> int:
        readings.append(T)
        return T

    generator = UUID7Generator(clock=clock)
    before = generator.generate()
    many = generator.generate_many(5)
    after = generator.generate()
    assert readings == [T, T, T]  # one clock reading per call
    made = [before, *many, after]
    assert made == sorted(made)
    assert len(set(made)) == 7
    assert [counter_of(value) for value in made] == [counter_of(before) + i for i in range(7)]
    assert all(value.version == 7 and uuid7_timestamp_ms(value) == T for value in made)
    assert generator.generate_many(0) == []


def test_strictly_increasing_when_the_clock_stands_still_or_steps_back() -> None:
    now = [T]
    generator = UUID7Generator(clock=lambda: now[0])
    made = [generator.generate() for _ in range(1000)]
    now[0] = T - 5_000
    made += [generator.generate() for _ in range(1000)]
    now[0] = T + 1
    made += [generator.generate() for _ in range(10)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    assert {uuid7_timestamp_ms(v) for v in made[:2000]} == {T}
    assert uuid7_timestamp_ms(made[-1]) == T + 1


def test_a_reset_keeps_the_ids_increasing() -> None:
    """The latest millisecond is kept across reset_process_state(), which production code may
    call too (random-unique.md): forgetting it (probe Z asked so that a test freezing the clock
    in the future would not date later tests' ids) let the next id sort before earlier ones
    (review C). testing.md says how to test the time an id holds."""
    now = [T + 10_000_000]  # a clock frozen in the future
    generator = UUID7Generator(clock=lambda: now[0])
    made = [generator.generate() for _ in range(100)]
    now[0] = T
    reset_process_state()
    made += [generator.generate() for _ in range(100)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    assert {uuid7_timestamp_ms(v) for v in made} == {T + 10_000_000}


def test_counter_overflow_moves_to_the_next_millisecond() -> None:
    generator = UUID7Generator(clock=lambda: T)
    generator.generate()
    generator._counter = (1 << 42) - 1  # type: ignore[attr-defined]  # the last counter value
    moved = generator.generate()
    assert uuid7_timestamp_ms(moved) == T + 1


@pytest.mark.slow
def test_eight_threads_exact_set_in_order_per_thread() -> None:
    generator = UUID7Generator(clock=lambda: T)
    results: list[list[uuid.UUID]] = [[] for _ in range(8)]

    def work(out: list[uuid.UUID]) -> None:
        out.extend(generator.generate() for _ in range(20_000))

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    made = [v for out in results for v in out]
    assert len(set(made)) == 160_000
    assert all(out == sorted(out) for out in results)


def test_fork_child_reseeds() -> None:
    generator = UUID7Generator(clock=lambda: T)
    generator.generate()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            with os.fdopen(write_end, "w") as out:
                out.write("\n".join(str(generator.generate()) for _ in range(100)))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        child_ids = {uuid.UUID(line) for line in pipe.read().splitlines()}
    os.waitpid(child, 0)
    parent_ids = {generator.generate() for _ in range(100)}
    assert len(child_ids) == 100
    assert not child_ids & parent_ids


def _generate_in_child(generator: UUID7Generator, timeout: float = 5.0) -> str:
    """``str(generator.generate())`` in a forked child; "HUNG" if it does not answer in time."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            os.close(read_end)
            os.write(write_end, str(generator.generate()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    ready, _, _ = select.select([read_end], [], [], timeout)
    if not ready:
        os.kill(child, 9)
        os.waitpid(child, 0)
        os.close(read_end)
        return "HUNG"
    answer = os.read(read_end, 100).decode()
    os.close(read_end)
    os.waitpid(child, 0)
    return answer


def test_fork_child_makes_ids_while_another_thread_held_the_lock() -> None:
    generator = UUID7Generator(clock=lambda: T)
    generator.generate()
    with generator._lock:  # another thread is making ids at the moment of fork
        answer = _generate_in_child(generator)
    assert answer != "HUNG"
    assert uuid7_timestamp_ms(uuid.UUID(answer)) == T


def test_fork_child_seeds_its_own_counter() -> None:
    generator = UUID7Generator(clock=lambda: T)
    generator.generate()
    child_id = uuid.UUID(_generate_in_child(generator))
    parent_id = generator.generate()
    # Not the parent's counter + 1 in both: the child's ids differ in 74 random bits, not 32.
    assert counter_of(child_id) != counter_of(parent_id)


@pytest.mark.parametrize(
    "representation", ["standard", "pythonLegacy", "javaLegacy", "unspecified"]
)
@pytest.mark.parametrize("field_class", [UUID4Field, UUID7Field])
def test_stored_as_binary_subtype_4(
    mongoengine_connect: Connect, representation: str, field_class: type[Any]
) -> None:
    db = mongoengine_connect(uuid_representation=representation)

    class Item(me.Document):
        id = field_class(primary_key=True)
        name = me.StringField()

    item = Item(name="a").save()
    assert type(item.id) is uuid.UUID
    assert item.id.version == field_class.version
    stored = db["item"].find_one()["_id"]
    assert stored in (Binary(item.id.bytes, 4), item.id)
    assert not isinstance(stored, Binary) or stored.subtype == 4
    assert Item.objects.get(id=str(item.id)).name == "a"


def test_uuid7_ids_sort_by_creation_in_the_database(mongoengine_db: Any) -> None:
    now = [T]
    generator = UUID7Generator(clock=lambda: now[0])

    class Event(me.Document):
        id = UUID7Field(primary_key=True, generator=generator)
        n = me.IntField()

    for n in range(20):
        now[0] = T + n // 3
        Event(n=n).save()
    assert [e.n for e in Event.objects.order_by("id")] == list(range(20))


@pytest.mark.parametrize(
    ("field_class", "junk", "message"),
    [
        (UUID4Field, str(uuid.uuid1()), "not a version 4 UUID"),
        (UUID7Field, str(uuid.uuid4()), "not a version 7 UUID"),
        (UUID7Field, "nope", "'nope'"),
        (UUID4Field, 42, "42"),
    ],
)
def test_wrong_versions_and_junk_are_validation_errors(
    mongoengine_db: Any, field_class: type[Any], junk: object, message: str
) -> None:
    class Item(me.Document):
        id = field_class(primary_key=True)

    with pytest.raises(me.ValidationError, match=message):
        Item(id=junk).save()
    assert Item.objects.count() == 0


@pytest.mark.parametrize("field_class", [UUID4Field, UUID7Field, LocalityUUIDField])
def test_a_stored_uuid_of_another_kind_reads_as_a_uuid(
    mongoengine_db: Any, field_class: type[Any]
) -> None:
    """A key stored before the field replaced another kind of id reads as the uuid.UUID it is,
    as a server's driver decodes it, on mongomock too (found by probe C: the stored Binary came
    back), and the document can be reloaded and deleted (standard-uuids.md)."""

    class Legacy(me.Document):
        id = field_class(primary_key=True)
        name = me.StringField()

    old = uuid.uuid1()  # a version no field of the package makes
    collection = Legacy._get_collection()
    collection.insert_one({"_id": Binary(old.bytes, 4), "name": "old"})
    loaded = Legacy.objects.get(id=old)
    assert type(loaded.id) is uuid.UUID
    assert loaded.id == old
    assert Legacy.objects.distinct("id") == [old]
    with pytest.raises(ValidationError, match=re.escape(repr(old))):
        loaded.validate()
    loaded.name = "renamed elsewhere"
    loaded.reload()
    assert loaded.name == "old"

    class Holder(me.Document):  # stored references to it resolve (review: not a Locality key)
        legacy = me.ReferenceField(Legacy)
        many = me.ListField(me.ReferenceField(Legacy))

    stored_key = Binary(old.bytes, 4)
    Holder._get_collection().insert_one({"legacy": stored_key, "many": [stored_key]})
    held = Holder.objects.get()
    assert held.legacy == loaded
    assert held.many == [loaded]
    assert Holder.objects.distinct("legacy") == [loaded]
    loaded.delete()
    assert list(collection.find()) == []


@pytest.mark.parametrize("field_class", [UUID4Field, UUID7Field, LocalityUUIDField])
def test_a_malformed_stored_uuid_loads_and_validate_names_it(
    mongoengine_db: Any, field_class: type[Any]
) -> None:
    class Malformed(me.Document):
        id = field_class(primary_key=True)

    Malformed._get_collection().insert_one({"_id": Binary(b"12345678", 4)})
    (loaded,) = Malformed.objects
    with pytest.raises(ValidationError, match="12345678"):
        loaded.validate()


def test_a_generator_says_its_clock_and_latest_millisecond() -> None:
    generator = UUID7Generator(clock=lambda: T)
    assert repr(UUID7Generator()) == "UUID7Generator(clock=time.time_ns, last_ms=-1)"
    generator.generate()
    assert re.fullmatch(rf"UUID7Generator\(clock=<function .*>, last_ms={T}\)", repr(generator))


def test_generator_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="clock must be a callable"):
        UUID7Generator(clock=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="random_bytes must be a callable"):
        UUID7Generator(random_bytes=b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a UUID7Generator"):
        UUID7Field(generator="x")  # type: ignore[arg-type]
    with pytest.raises(InvalidIdError, match=r"not a valid version 7 UUID \(it is of version 4\)"):
        uuid7_timestamp_ms(uuid.uuid4())


def test_uuid4_values_of_a_bulk_insert_are_version_4_and_read_from_random_bytes(
    mongoengine_db: Any,
) -> None:
    asked: list[int] = []

    def random_bytes(n: int) -> bytes:
        asked.append(n)
        return bytes(range(n))  # every byte distinct within a value: nothing masked by chance

    class Ticket(me.Document):
        id = UUID4Field(primary_key=True, random_bytes=random_bytes)
        n = me.IntField()

    Ticket.objects.insert([Ticket(n=n) for n in range(3)], load_bulk=False)
    assert asked == [48]  # one read for the whole insert
    stored = [raw["_id"] for raw in raw_collection(mongoengine_db.ticket).find().sort("n")]
    expected = []
    for at in (0, 16, 32):
        value = bytearray(range(at, at + 16))
        value[6] = (value[6] & 0x0F) | 0x40  # version 4, as uuid.uuid4() sets it
        value[8] = (value[8] & 0x3F) | 0x80  # variant 0b10
        expected.append(Binary(bytes(value), 4))
    assert stored == expected
    # The values are plain uuid.UUIDs, equal (and hashing equal) to uuid.uuid4()'s making.
    made = [uuid.UUID(bytes=bytes(range(at, at + 16)), version=4) for at in (0, 16, 32)]
    loaded = [ticket.id for ticket in Ticket.objects.order_by("n")]
    assert loaded == made
    assert {hash(value) for value in loaded} == {hash(v) for v in made}
    assert all(type(value) is uuid.UUID and value.version == 4 for value in loaded)


@pytest.mark.parametrize(
    ("random_bytes", "error", "message"),
    [
        (b"x", TypeError, "random_bytes must be a callable"),
        (lambda n: b"short", ValueError, r"random_bytes\(16\) returned b'short': expected exactly"),
        (lambda n: "text" * n, TypeError, r"random_bytes\(16\) returned 'texttext"),
    ],
)
def test_uuid4_random_bytes_is_checked(
    mongoengine_db: Any, random_bytes: Any, error: type[Exception], message: str
) -> None:
    def declare() -> Any:
        class Voucher(me.Document):
            id = UUID4Field(primary_key=True, random_bytes=random_bytes)

        return Voucher

    if not callable(random_bytes):
        with pytest.raises(error, match=message):
            declare()
        return
    Voucher = declare()
    with pytest.raises(error, match=message):
        Voucher().save()
    assert mongoengine_db.voucher.count_documents({}) == 0


class JunkUUIDs(me.Document):
    u4 = UUID4Field()
    u7 = UUID7Field()


@pytest.mark.parametrize("name", ["u4", "u7"])
def test_standard_uuid_error_does_not_describe_a_locality_uuid(
    mongoengine_db: Any, name: str
) -> None:
    with pytest.raises(ValidationError) as saved:
        JunkUUIDs(**{name: "not a uuid"}).save()
    with pytest.raises(ValidationError) as queried:
        JunkUUIDs.objects(**{name: "not a uuid"}).count()
    for error in (saved.value, queried.value):
        assert "Locality" not in str(error), str(error)
        assert f"not a valid version {name[1]} UUID" in str(error), str(error)
        assert "'xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx'" in str(error), str(error)
    assert list(JunkUUIDs._get_collection().find()) == []
