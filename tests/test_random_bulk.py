"""RandomUniqueField in ``Model.objects.insert([...])``: MongoEngine's ordered insert; a document
that collided on the field gets a fresh value and the insert resumes from it, every document
comes back exactly once, and a failure that cannot be retried stops the batch there (the
documents before it are written, those after it are not, as with any ordered insert)."""

from __future__ import annotations

from typing import Any

import mongoengine as me
import pytest
from mongoengine import signals
from mongoengine.errors import BulkWriteError, NotUniqueError
from test_random_unique import Script, codes, model, stored

from mongoengine_ids.errors import (
    BulkNotUniqueError,
    RetriesExhaustedError,
)
from mongoengine_ids.random_unique import RandomFieldStats, RandomUniqueField


def test_forced_collisions_every_document_exactly_once(mongoengine_db: Any) -> None:
    script = Script(0)
    Thing = model(script)
    Thing(name="old").save()  # value 1 (the object is gone: only the index holds it)
    # The draws for the four documents: 1, 2, 2 (held by document 1 of this very batch: drawn
    # again at once) 3, 3 (held by document 2: again) 4. The insert: document 0 collides with
    # "old" and is drawn again, 5.
    script.then(0, 1, 1, 2, 2, 3, 4)
    batch = [Thing(name=f"n{i}") for i in range(4)]
    inserted = Thing.objects.insert(batch)

    assert [doc.name for doc in inserted] == ["n0", "n1", "n2", "n3"]
    assert [doc.code for doc in inserted] == [5, 2, 3, 4]
    assert [doc.code for doc in batch] == [5, 2, 3, 4]
    assert len({doc.pk for doc in inserted}) == 4
    assert [doc.pk for doc in inserted] == [doc.pk for doc in batch]
    assert script.draws == 8
    assert Thing.code.stats() == RandomFieldStats(attempts=8, collisions=3, exhausted=0)
    raw = {doc["name"]: doc["code"] for doc in mongoengine_db.things.find()}
    assert raw == {"old": 1, "n0": 5, "n1": 2, "n2": 3, "n3": 4}
    assert mongoengine_db.things.count_documents({}) == 5


def test_a_single_document_is_retried_too(mongoengine_db: Any) -> None:
    script = Script(0)
    Thing = model(script)
    Thing().save()
    script.then(0, 0, 6)
    thing = Thing.objects.insert(Thing(name="one"))
    assert thing.code == 7
    assert script.draws == 4
    assert codes(mongoengine_db.things) == [1, 7]


def test_load_bulk_false_returns_the_ids_in_order(mongoengine_db: Any) -> None:
    script = Script(0)
    Thing = model(script)
    Thing().save()
    script.then(0, 1, 2)
    batch = [Thing(name="a"), Thing(name="b")]
    ids = Thing.objects.insert(batch, load_bulk=False)
    assert ids == [batch[0].pk, batch[1].pk]
    assert [mongoengine_db.things.find_one({"_id": i})["code"] for i in ids] == [3, 2]


def test_other_index_fails_after_the_documents_before_it_are_written(mongoengine_db: Any) -> None:
    script = Script(0)
    Thing = model(script)
    Thing(email="taken@example.com").save()
    script.then(1, 2, 3)
    batch = [Thing(name="a"), Thing(name="b", email="taken@example.com"), Thing(name="c")]
    with pytest.raises(BulkNotUniqueError) as raised:
        Thing.objects.insert(batch)

    error = raised.value
    # caught as what MongoEngine raises for a bulk duplicate, and as this package's error
    assert isinstance(error, NotUniqueError)
    assert isinstance(error, BulkWriteError)
    assert not isinstance(error, RetriesExhaustedError)
    assert script.draws == 4  # no retry
    assert Thing.code.stats().collisions == 0
    # ordered: "a" is written (pk set), "b" failed and "c" was never sent: both as before
    assert batch[0].code == 2
    assert batch[0].pk is not None
    assert [batch[1].code, batch[1].pk, batch[2].code, batch[2].pk] == [None] * 4
    assert {doc.get("name"): doc["code"] for doc in mongoengine_db.things.find()} == {
        None: 1,
        "a": 2,
    }
    assert mongoengine_db.things.find_one({"_id": batch[0].pk})["name"] == "a"


def test_exhaustion_in_a_batch(mongoengine_db: Any) -> None:
    script = Script(0)
    Thing = model(script, max_retries=1)
    Thing().save()
    # document 0 draws 1 (taken) twice; document 1 drew 2
    script.then(0, 1, 0)
    batch = [Thing(name="unlucky"), Thing(name="fine")]
    with pytest.raises(RetriesExhaustedError) as raised:
        Thing.objects.insert(batch)

    assert isinstance(raised.value, NotUniqueError)
    assert "all 2 attempts" in str(raised.value)
    assert batch[0].code is None
    assert batch[1].code is None  # after the failed one: never sent, as before insert()
    assert Thing.code.stats() == RandomFieldStats(attempts=4, collisions=2, exhausted=1)
    assert [doc["code"] for doc in mongoengine_db.things.find()] == [1]


def test_single_document_failure_raises_its_own_error(mongoengine_db: Any) -> None:
    script = Script(0)
    Thing = model(script, max_retries=1)
    Thing().save()
    script.then(0, 0)
    with pytest.raises(RetriesExhaustedError):
        Thing.objects.insert(Thing())
    assert codes(mongoengine_db.things) == [1]


def test_primary_key_batch_never_overwrites(mongoengine_db: Any) -> None:
    script = Script(0)

    class Keyed(me.Document):
        id = RandomUniqueField(digits=1, primary_key=True, rng=script)
        name = me.StringField()
        meta = {"collection": "keyed"}

    Keyed(name="keep").save()
    script.then(0, 2, 1)
    inserted = Keyed.objects.insert([Keyed(name="a"), Keyed(name="b")])
    assert [(doc.pk, doc.name) for doc in inserted] == [(2, "a"), (3, "b")]
    assert stored(mongoengine_db.keyed) == [
        {"_id": 1, "name": "keep"},
        {"_id": 2, "name": "a"},
        {"_id": 3, "name": "b"},
    ]


def test_only_the_collided_field_of_only_those_documents_is_regenerated(
    mongoengine_db: Any,
) -> None:
    number_script = Script(0)
    letter_script = Script(0)

    class Pair(me.Document):
        number = RandomUniqueField(digits=1, rng=number_script)
        letter = RandomUniqueField(length=1, alphabet="ABCD", rng=letter_script)
        meta = {"collection": "pairs"}

    Pair().save()  # 1, "A"
    number_script.then(1, 2)  # 2, 3: free
    letter_script.then(1, 0, 2)  # "B"; "A" (taken) then "C"
    inserted = Pair.objects.insert([Pair(), Pair()])
    assert [(doc.number, doc.letter) for doc in inserted] == [(2, "B"), (3, "C")]
    assert number_script.draws == 3  # never redrawn
    assert letter_script.draws == 4
    assert sorted((d["number"], d["letter"]) for d in mongoengine_db.pairs.find()) == [
        (1, "A"),
        (2, "B"),
        (3, "C"),
    ]


def test_assigned_values_are_inserted_ordered_as_before(mongoengine_db: Any) -> None:
    """No value generated for a retrying field: MongoEngine's ordered insert, unchanged."""
    Thing = model(Script(0))
    Thing().save()
    batch = [Thing(code=5), Thing(code=1), Thing(code=6)]
    with pytest.raises(BulkNotUniqueError) as raised:
        Thing.objects.insert(batch)
    assert not isinstance(raised.value, RetriesExhaustedError)  # assigned: never retried
    assert codes(mongoengine_db.things) == [1, 5]  # ordered: stopped at the duplicate


def test_a_draw_never_takes_a_value_assigned_to_another_document_of_the_batch(
    mongoengine_db: Any,
) -> None:
    # Probe BB: the draw for document 0 took 7, which document 1 was given; document 0 was
    # written first, document 1 refused and document 2 dropped.
    script = Script(6, 0, 1)  # 7 (held by document 1: drawn again), 1, then 2
    Thing = model(script)
    batch = [Thing(name="drawn"), Thing(code=7, name="given"), Thing(name="after")]
    Thing.objects.insert(batch)
    assert [(d["name"], d["code"]) for d in stored(mongoengine_db.things)] == [
        ("drawn", 1),
        ("given", 7),
        ("after", 2),
    ]
    assert script.draws == 3
    assert Thing.code.stats() == RandomFieldStats(attempts=3, collisions=1, exhausted=0)


def test_signals_fire_once_with_the_final_documents(mongoengine_db: Any) -> None:
    script = Script(0)
    Thing = model(script)
    Thing().save()
    script.then(0, 1, 2)
    seen: list[tuple[str, list[Any]]] = []

    def pre(sender: Any, documents: list[Any], **kwargs: Any) -> None:
        seen.append(("pre", [doc.code for doc in documents]))

    def post(sender: Any, documents: list[Any], **kwargs: Any) -> None:
        seen.append(("post", [doc.code for doc in documents]))

    signals.pre_bulk_insert.connect(pre, sender=Thing)
    signals.post_bulk_insert.connect(post, sender=Thing)
    try:
        Thing.objects.insert([Thing(), Thing()])
    finally:
        signals.pre_bulk_insert.disconnect(pre, sender=Thing)
        signals.post_bulk_insert.disconnect(post, sender=Thing)
    assert seen == [("pre", [None, None]), ("post", [3, 2])]


def test_wrong_documents_are_refused_before_anything_is_drawn(mongoengine_db: Any) -> None:
    script = Script()
    Thing = model(script)

    class Other(me.Document):
        pass

    with pytest.raises(me.OperationError, match="aren't instances"):
        Thing.objects.insert([Thing(), Other()])
    assert script.draws == 0
    assert mongoengine_db.things.count_documents({}) == 0


def test_a_failed_draw_in_a_batch_gives_back_the_claims_of_the_others(
    mongoengine_db: Any,
) -> None:
    # Found by probe AL: the first document's draw (1) stayed claimed by it after the batch
    # failed (nothing written), while the application kept it for a retry: no other document
    # of the process could be given 1 (RetriesExhaustedError on an empty collection).
    script = Script(0, 0, 0)  # the first draws 1; the second draws 1 twice: held by the first
    Thing = model(script, max_retries=1)
    batch = [Thing(name="a"), Thing(name="b")]
    with pytest.raises(RetriesExhaustedError, match=r"process.* 66\.7% of this process's 3"):
        Thing.objects.insert(batch)  # (review H: the figures were those before the draws)
    assert Thing.code.stats() == RandomFieldStats(attempts=3, collisions=2, exhausted=1)
    assert [batch[0].code, batch[1].code] == [None, None]
    assert stored(mongoengine_db.things) == []
    script.then(0)
    assert Thing(name="c").save().code == 1
    script.then(1, 2)
    Thing.objects.insert(batch)  # the application's retry
    assert [batch[0].code, batch[1].code] == [2, 3]
    found = [(doc["name"], doc["code"]) for doc in stored(mongoengine_db.things, "name", "code")]
    assert sorted(found) == [("a", 2), ("b", 3), ("c", 1)]


def test_a_value_assigned_to_a_write_that_failed_is_drawn_again(mongoengine_db: Any) -> None:
    # Review O: the claim of an assigned value outlived its failed write (the object kept):
    # the value could not be drawn, and a tiny space ran out of retries.
    script = Script(0)  # "other": 1
    Thing = model(script)
    Thing(email="taken", name="other").save()
    refused = Thing(code=7, email="taken", name="refused")
    with pytest.raises(NotUniqueError):
        refused.save()  # the email's index: nothing written, 7 free again
    script.then(6)  # 7
    drawn = Thing(name="drawn").save()
    assert drawn.code == 7
    assert sorted((d["name"], d["code"]) for d in stored(mongoengine_db.things)) == [
        ("drawn", 7),
        ("other", 1),
    ]
    assert refused.code == 7  # an assigned value stays the document's


def test_a_reset_of_the_process_state_forgets_the_claims_of_a_kept_document(
    mongoengine_db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Probe BZ-1: docs/testing.md's own fixture drops the database and calls
    reset_process_state() between tests; a document of the test before, kept alive (a failed
    test's traceback) while its insert's outcome was unknown, still claimed its value, which
    the next test's empty database then refused ("already taken", RetriesExhaustedError)."""
    import pymongo.errors

    from mongoengine_ids.resets import reset_process_state

    script = Script(0)
    Thing = model(script, max_retries=1)
    kept = Thing(name="kept")

    def lost(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise pymongo.errors.AutoReconnect("reply lost")

    with monkeypatch.context() as patched:
        patched.setattr(type(mongoengine_db.things), "insert_one", lost)
        with pytest.raises(pymongo.errors.AutoReconnect):
            kept.save()
    assert kept.code == 1
    mongoengine_db.things.drop()
    reset_process_state()
    script.then(0)
    assert Thing(name="next test").save().code == 1
    found = [(doc["name"], doc["code"]) for doc in stored(mongoengine_db.things, "name", "code")]
    assert found == [("next test", 1)]
