"""A generated field in ``meta["shard_key"]``: MongoEngine's update of an existing document reads
the shard key's value from the document it serialised, which the write path completes with the
values it makes, as it does for an insert. Compared side by side with MongoEngine's own
``SequenceField`` where it saves too."""

from __future__ import annotations

from typing import Any

import mongoengine as me
import pytest
from bson import ObjectId, json_util

from mongoengine_ids import SequenceField


class ShardedPlugin(me.Document):
    number = SequenceField()
    name = me.StringField()
    meta = {"shard_key": ("number",)}


class ShardedMongoEngine(me.Document):
    number = me.SequenceField()
    name = me.StringField()
    meta = {"shard_key": ("number",)}


MODELS = [ShardedMongoEngine, ShardedPlugin]


def raw(model: type[me.Document]) -> list[dict[str, Any]]:
    return list(model._get_collection().find())


@pytest.mark.parametrize("model", MODELS, ids=["mongoengine", "plugin"])
def test_a_key_assigned_after_building_is_saved_with_its_number(
    mongoengine_db: Any, model: Any
) -> None:
    document = model(name="a")
    document.id = ObjectId()  # MongoEngine takes it as stored: its update step runs
    document.save()
    assert raw(model) == [{"_id": document.id, "number": 1, "name": "a"}]
    assert document.number == 1


@pytest.mark.parametrize("model", MODELS, ids=["mongoengine", "plugin"])
def test_a_document_built_as_stored_is_saved_with_its_number(
    mongoengine_db: Any, model: Any
) -> None:
    key = ObjectId()
    document = model.from_json(
        json_util.dumps({"_id": key, "name": "imported"}),
        json_options=json_util.RELAXED_JSON_OPTIONS,
    )
    document.name = "changed"
    document.save()
    assert raw(model) == [{"_id": key, "name": "changed", "number": 1}]


def test_a_stored_copy_without_the_field_gets_it_and_the_change(mongoengine_db: Any) -> None:
    """The field added later: the number is filled in by its own conditional write, then
    MongoEngine's update (filtered by that shard key value) writes the change. MongoEngine's
    own field raises NotUniqueError here (its upsert filter misses the stored copy)."""
    collection = ShardedPlugin._get_collection()
    collection.insert_one({"name": "old"})
    document = ShardedPlugin.objects.get(name="old")
    document.name = "new"
    document.save()
    assert raw(ShardedPlugin) == [{"_id": document.id, "name": "new", "number": 1}]
    document.name = "newer"
    document.save()
    assert raw(ShardedPlugin) == [{"_id": document.id, "name": "newer", "number": 1}]


class Recording(me.Document):
    """An abstract base whose own update step reads the SON it gets."""

    meta = {"abstract": True}
    seen: list[Any] = []

    def _save_update(self, doc: Any, save_condition: Any, write_concern: Any) -> Any:
        self.seen.append(dict(doc))
        return super()._save_update(doc, save_condition, write_concern)


class Recorded(Recording):
    number = SequenceField()
    name = me.StringField()


def test_a_models_own_update_step_gets_the_values_made(mongoengine_db: Any) -> None:
    Recorded._get_collection().insert_one({"name": "old"})
    document = Recorded.objects.get(name="old")
    document.name = "new"
    Recording.seen.clear()
    document.save()
    assert Recording.seen == [{"_id": document.id, "name": "new", "number": 1}]
    assert raw(Recorded) == [{"_id": document.id, "name": "new", "number": 1}]
