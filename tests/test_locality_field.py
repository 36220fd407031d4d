"""LocalityUUIDField: storage under every uuidRepresentation, queries, bad input."""

from __future__ import annotations

import uuid
from typing import Any

import mongoengine as me
import pytest
from _write_support import raw_collection
from bson.binary import Binary

from mongoengine_ids import LocalityUUID, LocalityUUIDField, LocalityUUIDGenerator
from mongoengine_ids.testing import Connect

REPRESENTATIONS = ["standard", "pythonLegacy", "javaLegacy", "csharpLegacy", "unspecified"]


@pytest.mark.parametrize("representation", REPRESENTATIONS)
def test_stored_as_binary_subtype_4_under_every_uuid_representation(
    mongoengine_connect: Connect, representation: str
) -> None:
    db = mongoengine_connect(uuid_representation=representation)

    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)
        ref = LocalityUUIDField()

    place = Place(ref="20be0ffc-314a-bd53-7a50-013a65ca76d2").save()
    stored = db["place"].find_one()
    # Whatever the connection decodes it to (Binary or uuid.UUID), the bytes are the id's own,
    # in order, under subtype 4 (legacy representations would have reordered them).
    for key, value in (("_id", place.id), ("ref", place.ref)):
        if isinstance(stored[key], Binary):
            assert stored[key] == Binary(value.bytes, 4)
            assert stored[key].subtype == 4
        else:
            assert stored[key] == uuid.UUID(bytes=value.bytes)
    loaded = Place.objects.get(id=place.id)
    assert (loaded.id, loaded.ref) == (place.id, place.ref)
    assert type(loaded.id) is LocalityUUID
    assert Place.objects(ref=place.ref).count() == 1


def test_as_string_stores_lower_case_text(mongoengine_db: Any) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True, as_string=True)
        name = me.StringField()

    place = Place(name="a").save()
    text = str(place.id)
    assert len(text) == 36
    assert text == text.lower()
    assert list(mongoengine_db["place"].find()) == [{"_id": text, "name": "a"}]
    assert Place.objects.get(id=text.upper()).name == "a"
    assert type(Place.objects.get(id=place.id).id) is LocalityUUID


@pytest.mark.parametrize("as_string", [False, True])
def test_queries_accept_the_value_a_uuid_and_the_text(mongoengine_db: Any, as_string: bool) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True, as_string=as_string)
        name = me.StringField()

    places = [Place(name=f"p{i}").save() for i in range(3)]
    target = places[1].id
    for query in (target, uuid.UUID(str(target)), str(target), str(target).upper(), target.hex):
        assert [p.name for p in Place.objects(id=query)] == ["p1"]
    assert sorted(p.name for p in Place.objects(id__in=[str(places[0].id), places[2].id])) == [
        "p0",
        "p2",
    ]
    assert [p.name for p in Place.objects(id__ne=target).order_by("name")] == ["p0", "p2"]


@pytest.mark.parametrize(
    "junk",
    [
        "nope",  # not hex
        "20be0ffc-314a-bd53-7a50-013a65ca76d",  # a digit short
        "20be0ffc-314a-4d53-7a50-013a65ca76d2",  # a UUID, but version 4
        12345,  # an int
        3.5,  # a float
        b"\x00" * 16,  # 16 bytes, version nibble 0
        ["20be0ffc-314a-bd53-7a50-013a65ca76d2"],  # a list
    ],
)
def test_junk_assigned_raises_validation_error_on_validate_and_save(
    mongoengine_db: Any, junk: object
) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)
        ref = LocalityUUIDField()

    place = Place(ref=junk)
    assert place.ref == junk  # kept as given until validated
    with pytest.raises(me.ValidationError) as info:
        place.validate()
    assert repr(junk) in str(info.value)
    with pytest.raises(me.ValidationError):
        place.save()
    assert list(mongoengine_db["place"].find()) == []
    assert place.id is None


@pytest.mark.parametrize("junk", ["nope", 12, "20be0ffc-314a-bd53-7a50"])
def test_junk_in_a_query_raises_validation_error(mongoengine_db: Any, junk: object) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)

    with pytest.raises(me.ValidationError, match=repr(junk).replace("[", r"\[")):
        Place.objects(id=junk).first()


def test_a_standard_uuid_can_be_queried_but_not_stored(mongoengine_db: Any) -> None:
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)

    random_uuid = uuid.uuid4()
    assert Place.objects(id=random_uuid).first() is None
    with pytest.raises(me.ValidationError, match="version nibble b"):
        Place(id=random_uuid).save()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"mode": "fast"}, ValueError, "mode='fast'"),
        ({"mode": "spread", "generator": LocalityUUIDGenerator()}, ValueError, "not both"),
        ({"generator": "spread"}, TypeError, "must be a LocalityUUIDGenerator"),
        ({"as_string": "yes"}, TypeError, "as_string must be a bool"),
    ],
)
def test_field_arguments_are_checked(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        LocalityUUIDField(**kwargs)


def test_sequential_mode_keeps_ids_of_the_same_moment_together(mongoengine_db: Any) -> None:
    generator = LocalityUUIDGenerator(clock=lambda: 1350327498450, mode="sequential")

    class Event(me.Document):
        id = LocalityUUIDField(primary_key=True, generator=generator)

    events = [Event().save() for _ in range(5)]
    counters = [event.id.sequential_counter for event in events]
    assert counters == list(range(counters[0], counters[0] + 5))
    stored = [doc["_id"] for doc in raw_collection(mongoengine_db["event"]).find().sort("_id", 1)]
    assert stored == [Binary(event.id.bytes, 4) for event in events]


def test_field_mode_makes_one_generator_per_field(mongoengine_db: Any) -> None:
    class Event(me.Document):
        id = LocalityUUIDField(primary_key=True, mode="sequential")

    assert Event.id.generator is Event.id.generator
    assert Event.id.generator.mode == "sequential"
    first, second = Event().save(), Event().save()
    assert second.id.sequential_counter == (first.id.sequential_counter + 1) % 2**32


def test_bulk_insert_checks_binary_values_it_does_not_validate(mongoengine_db: Any) -> None:
    # QuerySet.insert() never calls validate(): to_mongo() is the last line of defence.
    class Place(me.Document):
        id = LocalityUUIDField(primary_key=True)

    random_uuid = uuid.uuid4()
    with pytest.raises(me.ValidationError, match="version nibble b"):
        Place.objects.insert([Place(id=Binary(random_uuid.bytes, 4))])
    with pytest.raises(me.ValidationError, match="version nibble b"):
        Place(id=Binary(random_uuid.bytes, 4)).save(validate=False)
    assert list(mongoengine_db["place"].find()) == []
