"""Holes in the write path's newer parts, each found by a review: reserve_in reservations made
for a write (a document, an upsert), a SortedListField ordered by a generated field, a model's
own update() and drop_collection(), counters of another layout, a collection dropped by a model
without generated fields, and the error of a bulk insert whose retries run out. Each test checks
the stored documents."""

from __future__ import annotations

from typing import Any

import mongoengine as me
import pymongo.errors
import pytest
from mongoengine.errors import NotUniqueError
from test_random_unique import Script

from mongoengine_ids import RandomUniqueField, SequenceField


def _codes(collection: Any, name: str = "code") -> list[Any]:
    return sorted(doc.get(name) for doc in collection.find())


# -- reserve_in owners --------------------------------------------------------------------------


def test_reserve_in_a_saved_document_inserted_again_as_new_is_refused_its_value(
    mongoengine_db: Any,
) -> None:
    class RtTicket(me.Document):
        code = RandomUniqueField(digits=1, rng=Script(), reserve_in="ticket_codes")
        meta = {"collection": "tickets"}

    ticket = RtTicket(code=7).save()
    ticket.pk = None  # MongoEngine inserts it as a new document
    with pytest.raises(NotUniqueError):
        ticket.save()
    assert _codes(mongoengine_db.tickets) == [7]


class RtPart(me.EmbeddedDocument):
    code = RandomUniqueField(digits=1, rng=Script(), reserve_in="part_codes")


class RtKit(me.Document):
    parts = me.ListField(me.EmbeddedDocumentField(RtPart))
    meta = {"collection": "kits"}


def test_reserve_in_two_embedded_documents_assigned_the_same_value_are_refused(
    mongoengine_db: Any,
) -> None:
    with pytest.raises(NotUniqueError):
        RtKit(parts=[RtPart(code=7), RtPart(code=7)]).save()
    stored = [p["code"] for doc in mongoengine_db.kits.find() for p in doc.get("parts", [])]
    assert stored == []


def test_reserve_in_an_embedded_document_appended_with_a_value_its_document_holds_is_refused(
    mongoengine_db: Any,
) -> None:
    kit = RtKit(parts=[RtPart(code=7)]).save()
    kit.parts.append(RtPart(code=7))
    with pytest.raises(NotUniqueError):
        kit.save()
    stored = [p["code"] for doc in mongoengine_db.kits.find() for p in doc.get("parts", [])]
    assert stored == [7]


# -- counters of another layout -----------------------------------------------------------------


def test_sequence_layout_check_an_explicit_value_does_not_create_a_counter_beside_shards(
    mongoengine_db: Any,
) -> None:
    import random

    from mongoengine_ids.errors import CorruptedCounterError
    from mongoengine_ids.sequence import Sequence

    def sequence(shards: int) -> Sequence:
        return Sequence(
            "tickets", database=mongoengine_db, digits=1, shards=shards, rng=random.Random(3)
        )

    handed = sequence(3).next_values(9)
    assert sorted(handed) == list(range(1, 10))
    changed = sequence(1)
    stored = list(mongoengine_db["mongoengine.counters"].find())
    # An explicit value (a document saved with number=1) is told to the sequence first: it
    # must not create the plain counter beside the shard counters (it would hand their values
    # out again).
    with pytest.raises(CorruptedCounterError, match="cannot change on a live sequence"):
        changed.raise_to(1)
    with pytest.raises(CorruptedCounterError, match="cannot change on a live sequence"):
        changed.set_counter(5)
    assert list(mongoengine_db["mongoengine.counters"].find()) == stored


def test_sequence_field_explicit_value_after_shards_changed_never_repeats_a_value(
    mongoengine_db: Any,
) -> None:
    from mongoengine_ids.errors import CorruptedCounterError

    class RtTicket(me.Document):
        number = SequenceField(digits=2, shards=3, sequence_name="tix")
        meta = {"collection": "tix"}

    for _ in range(30):
        RtTicket().save()  # values from the low end of each shard: 1.., 34.., 67..
    stored = {doc["number"] for doc in mongoengine_db.tix.find()}
    # a value no document holds, just below a run a shard handed out
    explicit = max(v - 1 for v in stored if v > 1 and v - 1 not in stored)

    class RtTicket2(me.Document):
        number = SequenceField(digits=2, sequence_name="tix")  # shards changed to 1
        meta = {"collection": "tix"}

    with pytest.raises(CorruptedCounterError):
        RtTicket2().save()  # the layout check refuses a generated value, as it should
    with pytest.raises(CorruptedCounterError):
        RtTicket2(number=explicit).save()  # an explicit value no document holds
    with pytest.raises(CorruptedCounterError):
        RtTicket2().save()
    numbers = [doc["number"] for doc in mongoengine_db.tix.find()]
    assert sorted(numbers) == sorted(stored)  # nothing written


# -- reserve_in: an upsert retried whose document does not match its filter ---------------------


def test_reserve_in_upsert_retry_never_stores_the_value_twice(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mongomock.collection

    class RtJob(me.Document):
        code = RandomUniqueField(digits=1, rng=Script(), reserve_in="job_codes")
        status = me.StringField()
        meta = {"collection": "jobs"}

    real = mongomock.collection.Collection.update_one

    def lost(self: Any, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(mongomock.collection.Collection, "update_one", real)
        real(self, *args, **kwargs)  # applied; the reply is lost
        raise pymongo.errors.AutoReconnect("reply lost")

    monkeypatch.setattr(mongomock.collection.Collection, "update_one", lost)
    with pytest.raises(pymongo.errors.AutoReconnect):
        RtJob.objects(status="pending").update_one(set__status="done", set__code=7, upsert=True)
    assert _codes(mongoengine_db.jobs) == [7]
    # The application's retry of the same call: refused, 7 is held by the document the first
    # attempt stored (its filter no longer matches it), never stored twice.
    with pytest.raises(NotUniqueError, match=r"RtJob\.code: 7 is held by a stored document"):
        RtJob.objects(status="pending").update_one(set__status="done", set__code=7, upsert=True)
    assert _codes(mongoengine_db.jobs) == [7]


# -- drop_collection by another model of the collection -----------------------------------------


def test_random_index_check_again_after_the_base_model_drops_the_shared_collection(
    mongoengine_db: Any,
) -> None:
    from mongoengine_ids.random_unique.field import UniqueIndexMissingError

    class RtAnimal(me.Document):
        name = me.StringField()
        meta = {"collection": "animals", "allow_inheritance": True, "auto_create_index": False}

    class RtDog(RtAnimal):
        code = RandomUniqueField(digits=1, rng=Script(4, 4, 4), max_retries=1)

    mongoengine_db.animals.create_index([("code", pymongo.ASCENDING)], unique=True)
    RtDog().save()
    RtAnimal.drop_collection()  # a model's drop_collection(): the index goes with it
    with pytest.raises(UniqueIndexMissingError):
        RtDog().save()
    assert _codes(mongoengine_db.animals) == []


# -- a model's own update() ---------------------------------------------------------------------


def test_a_models_own_update_with_positional_arguments_still_works(mongoengine_db: Any) -> None:
    class RtNote(me.Document):
        number = SequenceField()
        text = me.StringField()
        meta = {"collection": "notes"}

        def update(self, changes: dict[str, Any], **kwargs: Any) -> Any:  # type: ignore[override]
            return super().update(**changes, **kwargs)

    note = RtNote(text="a").save()
    note.update({"set__text": "b"})  # plain MongoEngine: fine
    assert [doc["text"] for doc in mongoengine_db.notes.find()] == ["b"]


def test_a_models_own_drop_collection_with_arguments_still_works(mongoengine_db: Any) -> None:
    class RtMemo(me.Document):
        number = SequenceField()
        meta = {"collection": "memos"}

        @classmethod
        def drop_collection(cls, also_counters: bool = False) -> None:  # type: ignore[override]
            super().drop_collection()

    RtMemo().save()
    RtMemo.drop_collection(also_counters=False)  # plain MongoEngine: fine
    assert mongoengine_db.memos.count_documents({}) == 0


# -- SortedListField ordered by a generated field -----------------------------------------------


def test_sorted_list_with_a_stored_item_lacking_the_key_is_not_written_unsorted(
    mongoengine_db: Any,
) -> None:
    class RtStep(me.EmbeddedDocument):
        n = SequenceField()
        label = me.StringField()

    class RtPlan(me.Document):
        steps = me.SortedListField(me.EmbeddedDocumentField(RtStep), ordering="n")
        meta = {"collection": "plans"}

    # stored before the field existed: one step lacks n
    mongoengine_db.plans.insert_one({"steps": [{"n": 50, "label": "x"}, {"label": "old"}]})
    plan = RtPlan.objects.get()
    plan.steps.append(RtStep(label="new"))
    with pytest.raises(KeyError, match="'n'"):  # plain MongoEngine's outcome
        plan.save()
    assert mongoengine_db.plans.find_one()["steps"] == [{"n": 50, "label": "x"}, {"label": "old"}]


# -- SequenceField.retries_exhausted in a bulk insert -------------------------------------------


def test_sequence_bulk_insert_exhausted_is_still_mongoengines_bulk_write_error(
    mongoengine_db: Any,
) -> None:
    from mongoengine.errors import BulkWriteError

    class RtImported(me.Document):
        id = SequenceField(primary_key=True)
        name = me.StringField()
        meta = {"collection": "imported"}

    # documents imported without the counter hold 1..9
    mongoengine_db.imported.insert_many([{"_id": n, "name": "old"} for n in range(1, 10)])
    with pytest.raises(NotUniqueError) as raised:
        RtImported.objects.insert([RtImported(name="new")])
    # MongoEngine's insert() raises BulkWriteError for a duplicate key of insert_many, and the
    # package's bulk errors are caught as one (BulkNotUniqueError); the field's error is not.
    assert isinstance(raised.value, BulkWriteError), type(raised.value).__mro__
    assert mongoengine_db.imported.count_documents({"name": "new"}) == 0
