"""Values in updates checked as save() checks them (decorated and formatted sequences, strings of
digits, bools, filter values of upserts), reserve_in reservations of one embedded object placed
twice, an upsert's retry meeting a value others may hold, a model's own drop_collection(), and
the error of a bulk insert whose reservations run out. Each test checks the stored documents."""

from __future__ import annotations

from typing import Any

import mongoengine as me
import pymongo
import pytest
from mongoengine.errors import BulkWriteError, NotUniqueError, ValidationError
from test_random_unique import Script

from mongoengine_ids import RandomUniqueField, SequenceField, UUID4Field


def _codes(collection: Any, name: str = "code") -> list[Any]:
    return sorted(doc.get(name) for doc in collection.find())


def _part_codes(collection: Any) -> list[Any]:
    return sorted(p["code"] for doc in collection.find() for p in doc.get("parts", []))


# -- GeneratedField.prepare_query_value ------------------------------------------------------


def test_decorated_sequence_set_update_stores_the_decorated_value(mongoengine_db: Any) -> None:
    """MongoEngine's SequenceField decorates a value given to set__ (prepare_query_value ->
    value_decorator): so does this one."""

    def tag(n: int) -> str:
        return f"A{n}"

    class VDecorated(me.Document):
        code = SequenceField(value_decorator=tag, sequence_name="v_dec")
        meta = {"collection": "v_decorated"}

    class VPlainDecorated(me.Document):
        code = me.SequenceField(value_decorator=tag, sequence_name="v_plain_dec")
        meta = {"collection": "v_plain_decorated"}

    ours, theirs = VDecorated().save(), VPlainDecorated().save()
    VDecorated.objects(id=ours.id).update(set__code=5)
    VPlainDecorated.objects(id=theirs.id).update(set__code=5)
    assert _codes(mongoengine_db.v_plain_decorated) == ["A5"]  # plain MongoEngine
    assert _codes(mongoengine_db.v_decorated) == ["A5"]


def test_decorated_sequence_upsert_set_stores_the_decorated_value(mongoengine_db: Any) -> None:
    def tag(n: int) -> str:
        return f"A{n}"

    class VDecoratedUp(me.Document):
        code = SequenceField(value_decorator=tag, sequence_name="v_dec_up")
        name = me.StringField()
        meta = {"collection": "v_decorated_up"}

    VDecoratedUp.objects(name="x").update_one(set__code=5, upsert=True)
    assert _codes(mongoengine_db.v_decorated_up) == ["A5"]


def test_set_update_takes_a_digit_string_as_save_does(mongoengine_db: Any) -> None:
    """save() takes seq="5" (the field coerces it to 5), as MongoEngine's SequenceField
    (value_decorator=int) does: set__ and push_all__ take it too (coerced, then checked)."""

    class VDigits(me.Document):
        seq = SequenceField(sequence_name="v_digits")
        nums = me.ListField(SequenceField(sequence_name="v_digits_nums"))
        meta = {"collection": "v_digits"}

    VDigits(seq="5").validate()  # save() accepts it
    document = VDigits().save()
    VDigits.objects(id=document.id).update(set__seq="5", push_all__nums=[4, "5"])
    stored = mongoengine_db.v_digits.find_one()
    assert (stored["seq"], stored["nums"]) == (5, [4, 5])


def test_an_update_of_a_list_of_sequence_values_names_the_field(mongoengine_db: Any) -> None:
    """The error quotes the value but names '<unbound SequenceField>', not the model's field."""

    class VListed(me.Document):
        nums = me.ListField(SequenceField(sequence_name="v_listed_nums"))
        meta = {"collection": "v_listed"}

    document = VListed().save()
    with pytest.raises(ValidationError) as caught:
        VListed.objects(id=document.id).update(push__nums=-1)
    assert "VListed.nums" in str(caught.value), str(caught.value)


def test_a_query_by_a_bool_is_refused_for_a_decorated_sequence(mongoengine_db: Any) -> None:
    """A bool is refused in queries, for a value_decorator SequenceField too."""

    class VDecoratedBool(me.Document):
        code = SequenceField(value_decorator=lambda n: f"A{n}", sequence_name="v_dec_bool")
        meta = {"collection": "v_decorated_bool"}

    VDecoratedBool().save()
    with pytest.raises(ValidationError, match="True"):
        list(VDecoratedBool.objects(code=True))


def test_a_query_by_a_bool_is_refused_in_set_of_a_decorated_sequence(
    mongoengine_db: Any,
) -> None:
    class VDecoratedBoolSet(me.Document):
        code = SequenceField(value_decorator=lambda n: f"A{n}", sequence_name="v_dec_bool_set")
        meta = {"collection": "v_decorated_bool_set"}

    document = VDecoratedBoolSet().save()
    with pytest.raises(ValidationError, match="True"):
        VDecoratedBoolSet.objects(id=document.id).update(set__code=True)
    assert _codes(mongoengine_db.v_decorated_bool_set) == ["A1"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("ri", 5), ("rs", "!!"), ("u4", "00000000-0000-1000-8000-000000000000")],
    ids=["int-outside-space", "str-not-in-alphabet", "uuid-version-1"],
)
def test_an_upsert_refuses_a_filter_value_that_save_refuses(
    mongoengine_db: Any, field: str, value: Any
) -> None:
    """A value fixed by the filter is written by the upsert; save() refuses it, and so does the
    same upsert when the filter holds it inside $and (set_on_insert__ is now validated). Plain
    equality writes it unchecked."""

    class VUpserted(me.Document):
        ri = RandomUniqueField(digits=6)
        rs = RandomUniqueField(length=8)
        u4 = UUID4Field()
        name = me.StringField()
        meta = {"collection": "v_upserted"}

    with pytest.raises(ValidationError):
        VUpserted(**{field: value}).validate()  # save() refuses it
    with pytest.raises(ValidationError):  # so does the upsert, inside $and
        VUpserted.objects(me.Q(**{field: value}) & me.Q(**{f"{field}__ne": None})).upsert_one(
            set__name="and"
        )
    with pytest.raises(ValidationError):
        VUpserted.objects(**{field: value}).upsert_one(set__name="plain")
    assert mongoengine_db.v_upserted.count_documents({}) == 0


# -- reserve_in owners ---------------------------------------------------------------------


class VPart(me.EmbeddedDocument):
    code = RandomUniqueField(digits=3, reserve_in="v_part_codes")


class VKit(me.Document):
    parts = me.ListField(me.EmbeddedDocumentField(VPart))
    meta = {"collection": "v_kits"}


def test_reserve_in_one_embedded_object_in_two_documents_of_a_bulk_insert_is_refused(
    mongoengine_db: Any,
) -> None:
    """One embedded object held by two documents of one bulk insert: its reservation is made
    once, the second is refused (the same owner, but the same call)."""

    part = VPart(code=777)
    with pytest.raises(NotUniqueError):
        VKit.objects.insert([VKit(parts=[part]), VKit(parts=[part])])
    assert _part_codes(mongoengine_db.v_kits) == []


def test_reserve_in_one_embedded_object_twice_in_a_document_is_refused(
    mongoengine_db: Any,
) -> None:
    """The same embedded object twice in one document is refused its value the second time,
    as two objects given one value are."""

    part = VPart(code=778)
    with pytest.raises(NotUniqueError):
        VKit(parts=[part, part]).save()
    assert _part_codes(mongoengine_db.v_kits) == []


def test_sequence_upsert_retry_that_never_landed_is_not_refused(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SequenceField's explicit value may be held by other documents: an upsert's retry is
    not refused it. The first attempt failed before it was applied (AutoReconnect): the retry
    ends as the call would have (written once)."""
    import mongomock.collection

    class VJob(me.Document):
        number = SequenceField(sequence_name="v_jobs")
        status = me.StringField()
        meta = {"collection": "v_jobs"}

    VJob(number=7, status="imported").save()  # another document holds 7: save() allows it
    real = mongomock.collection.Collection.update_one

    def lost(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.name != "v_jobs":
            return real(self, *args, **kwargs)
        monkeypatch.setattr(mongomock.collection.Collection, "update_one", real)
        raise pymongo.errors.AutoReconnect("connection lost before the write was sent")

    monkeypatch.setattr(mongomock.collection.Collection, "update_one", lost)
    with pytest.raises(pymongo.errors.AutoReconnect):
        VJob.objects(status="pending").update_one(set__status="done", set__number=7, upsert=True)
    assert mongoengine_db.v_jobs.count_documents({}) == 1  # nothing landed
    # the application's retry of the same call: written once
    VJob.objects(status="pending").update_one(set__status="done", set__number=7, upsert=True)
    assert sorted((d["status"], d["number"]) for d in mongoengine_db.v_jobs.find()) == [
        ("done", 7),
        ("imported", 7),
    ]


# -- a model's own drop_collection -------------------------------------------------------


def test_a_models_own_drop_collection_still_resets_the_index_check(mongoengine_db: Any) -> None:
    """An override that drops the collection itself (without MongoEngine's drop_collection)
    drops the indexes too: the field looks for its unique index again."""
    from mongoengine_ids.random_unique.field import UniqueIndexMissingError

    class VDropped(me.Document):
        code = RandomUniqueField(digits=1, rng=Script(4, 4, 4), max_retries=1)
        meta = {"collection": "v_dropped", "auto_create_index": False}

        @classmethod
        def drop_collection(cls) -> None:  # type: ignore[override]
            cls._get_db().drop_collection(cls._get_collection_name())
            cls._collection = None

    mongoengine_db.v_dropped.create_index([("code", pymongo.ASCENDING)], unique=True)
    VDropped().save()
    VDropped.drop_collection()  # its indexes go with it
    with pytest.raises(UniqueIndexMissingError):
        VDropped().save()
    assert _codes(mongoengine_db.v_dropped) == []


# -- BulkRetriesExhaustedError -------------------------------------------------------------


def test_bulk_insert_reserve_in_exhausted_is_a_bulk_retries_exhausted_error(
    mongoengine_db: Any,
) -> None:
    """docs/guarantees.md: 'RetriesExhaustedError (...; in a bulk insert
    BulkRetriesExhaustedError, also MongoEngine's BulkWriteError)'. With reserve_in, a bulk
    insert whose draws are all reserved raises a plain RetriesExhaustedError."""
    from mongoengine_ids import BulkRetriesExhaustedError

    class VReserved(me.Document):
        code = RandomUniqueField(
            digits=1, rng=Script(4, 4, 4, 4), max_retries=2, reserve_in="v_reserved_codes"
        )
        meta = {"collection": "v_reserved"}

    VReserved(code=5).save()
    with pytest.raises(BulkWriteError) as raised:
        VReserved.objects.insert([VReserved()])
    assert isinstance(raised.value, BulkRetriesExhaustedError)
    assert _codes(mongoengine_db.v_reserved) == [5]
