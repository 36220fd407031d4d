"""The import-time check of the MongoEngine internals the package relies on (its seam): a
MongoEngine lacking one fails at import with an error naming its version and what is missing,
instead of a wrong write later."""

from __future__ import annotations

from typing import Any

import mongoengine
import pytest
from mongoengine.base import BaseField
from mongoengine.document import Document
from mongoengine.fields import SortedListField
from mongoengine.queryset.base import BaseQuerySet
from pymongo import ReadPreference

from mongoengine_ids.write import seam


def test_the_installed_mongoengine_passes() -> None:
    seam.check_internals()


@pytest.mark.parametrize(
    ("owner", "name", "named"),
    [
        (Document, "_save_create", "Document._save_create is missing"),
        (BaseQuerySet, "_clone_into", "BaseQuerySet._clone_into is missing"),
        (BaseField, "_auto_gen", "a field has no _auto_gen"),
        (BaseQuerySet, "_query", "a queryset has no _query"),
    ],
)
def test_a_missing_internal_fails_naming_it_and_the_version(
    monkeypatch: pytest.MonkeyPatch, owner: type, name: str, named: str
) -> None:
    monkeypatch.delattr(owner, name)
    with pytest.raises(ImportError) as raised:
        seam.check_internals()
    message = str(raised.value)
    assert f"does not support MongoEngine {mongoengine.__version__}" in message
    assert named in message


def test_a_renamed_instance_attribute_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attributes set by constructors (a queryset's ``_loaded_fields``, a
    ``SortedListField``'s ``_ordering``) are looked for on throwaway objects."""
    init = SortedListField.__init__

    def renamed(self: SortedListField, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)
        self.__dict__["_order_by"] = self.__dict__.pop("_ordering")

    monkeypatch.setattr(SortedListField, "__init__", renamed)
    with pytest.raises(ImportError, match="a SortedListField has no _ordering"):
        seam.check_internals()


def test_a_changed_signature_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def _save_update(self: Document, doc: object, condition: object, write_concern: object) -> None:
        raise AssertionError("never called")

    monkeypatch.setattr(Document, "_save_update", _save_update)
    with pytest.raises(ImportError, match=r"Document\._save_update\(.*'condition'"):
        seam.check_internals()


def test_the_write_paths_reads_see_what_the_primary_applied(mongoengine_db: Any) -> None:
    """The reads that decide a write (did an insert whose reply was lost land; is a value
    taken) see what the primary applied: on a ``readConcernLevel=majority`` connection a write
    not yet replicated was invisible to them, the state a lost reply leaves (probe AT: the
    retry took its own insert for another document's, and stored a second copy). mongomock
    has no replication: what is checked is what the reads ask for."""
    from pymongo.read_concern import ReadConcern

    majority = mongoengine_db.things.with_options(
        read_preference=ReadPreference.SECONDARY, read_concern=ReadConcern("majority")
    )
    decided = seam.primary(majority)
    assert decided.read_preference == ReadPreference.PRIMARY
    assert decided.read_concern.level == "local"
    assert decided.write_concern == majority.write_concern
    assert seam.primary(decided) is decided


def test_a_driver_error_is_one_raised_before_or_by_the_database_call() -> None:
    """``modify()`` keeps its values when it fails after its database call (building the
    document it returns); an error of the driver is one of the call. A reply the driver cannot
    decode comes after the write (review J: ``InvalidBSON`` had been taken for one before)."""
    import bson.errors
    import pymongo.errors
    from mongoengine.errors import FieldDoesNotExist, OperationError

    from mongoengine_ids.write.values import from_driver

    wrapped = OperationError("could not save")
    wrapped.__cause__ = pymongo.errors.AutoReconnect("lost")
    for error in (
        pymongo.errors.OperationFailure("refused"),
        wrapped,
        bson.errors.InvalidDocument("cannot encode object"),
        OverflowError("MongoDB can only handle up to 8-byte ints"),
    ):
        assert from_driver(error), error
    for error in (
        bson.errors.InvalidBSON("year 10000 is out of range"),
        FieldDoesNotExist("The fields {'x'} do not exist"),
        RuntimeError("post_init handler failed"),
    ):
        assert not from_driver(error), error


def test_models_made_again_under_one_name_are_all_hooked_and_freed_once_dropped(
    mongoengine_db: Any,
) -> None:
    """Probe 40a found models by the subclasses, not by MongoEngine's registry (one class per
    name): a first cache of that walk kept every class it had seen alive (review 152). Made
    again and again under one name, as a notebook's cell run again, each model in use is found,
    and those dropped are freed."""
    import gc
    import weakref

    from mongoengine_ids import UUID4Field

    line = type("FreedLine", (mongoengine.EmbeddedDocument,), {"code": UUID4Field()})
    made = []
    for _ in range(5):
        field = mongoengine.ListField(mongoengine.EmbeddedDocumentField(line))
        made.append(type("FreedOrder", (Document,), {"lines": field}))
    assert set(made) <= set(seam.document_classes())
    kept = made.pop()
    seam.uuid_keyed_models_of("freed_order")  # (the look-ups the write path makes)
    dropped = [weakref.ref(kind) for kind in made]
    made.clear()
    gc.collect()
    assert [ref() for ref in dropped] == [None] * 4
    assert kept in seam.document_classes()
