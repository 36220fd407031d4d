"""The fields are typed: what a type checker sees of them, and that documents hold just that.

mypy checks this file (``files`` in pyproject's ``[tool.mypy]``): each ``assert_type`` fails
the check when the checker sees another type. pytest runs it too, so the values a document
really holds after ``save()`` are shown to be of the types claimed. (MongoEngine has no type
hints: under ``--strict``, subclassing its ``Document`` needs ``# type: ignore[misc]``.)
"""

from __future__ import annotations

import sys
import uuid
from typing import Any, cast

import mongoengine as me
from mongoengine.base import BaseField

from mongoengine_ids import (
    GeneratedField,
    LocalityUUID,
    LocalityUUIDField,
    LocalityUUIDGenerator,
    RandomUniqueField,
    Sequence,
    SequenceField,
    UUID4Field,
    UUID7Field,
    UUID7Generator,
    UUIDValueField,
)
from mongoengine_ids.write import seam

if sys.version_info >= (3, 11):
    from typing import assert_type
else:  # pragma: no cover - Python 3.10 (typing_extensions comes with mypy)
    from typing_extensions import assert_type


class TypedPlace(me.Document):  # type: ignore[misc]
    meta = {"collection": "typed_places"}
    id = LocalityUUIDField(primary_key=True)
    name = me.StringField()


class TypedEvent(me.Document):  # type: ignore[misc]
    meta = {"collection": "typed_events"}
    id = UUID7Field(primary_key=True)
    token = UUID4Field()


class TypedAccount(me.Document):  # type: ignore[misc]
    meta = {"collection": "typed_accounts"}
    number = SequenceField()
    invoice = SequenceField(prefix="INV-", digits=6, zero_pad=True, sequence_name="typed_inv")


class TypedTicket(me.Document):  # type: ignore[misc]
    meta = {"collection": "typed_tickets"}
    code = RandomUniqueField(digits=8)
    voucher = RandomUniqueField(length=10)


def test_on_a_document_the_checker_sees_the_values_type(mongoengine_db: Any) -> None:
    place, event, account, ticket = TypedPlace(), TypedEvent(), TypedAccount(), TypedTicket()
    assert_type(place.id, LocalityUUID | None)
    assert_type(event.id, uuid.UUID | None)
    assert_type(event.token, uuid.UUID | None)
    assert_type(account.number, int | str | None)
    assert_type(account.invoice, int | str | None)
    assert_type(ticket.code, int | str | None)
    assert_type(ticket.voucher, int | str | None)
    assert (place.id, event.id, account.number, ticket.code) == (None, None, None, None)

    for document in (place, event, account, ticket):
        document.save()
    assert type(place.id) is LocalityUUID
    assert type(event.id) is uuid.UUID
    assert type(event.token) is uuid.UUID
    assert type(account.number) is int
    assert type(account.invoice) is str
    assert type(ticket.code) is int
    assert type(ticket.voucher) is str

    # Querysets are MongoEngine's, untyped (and pyright does not see the metaclass's `objects`):
    # cast what they return to get the model's types.
    found = TypedPlace.objects.get(id=place.id)  # pyright: ignore[reportAttributeAccessIssue]
    loaded = cast(TypedPlace, found)
    assert_type(loaded.id, LocalityUUID | None)
    assert loaded.id == place.id


def test_on_the_class_the_checker_sees_the_field() -> None:
    assert_type(TypedPlace.id, LocalityUUIDField)
    assert_type(TypedPlace.id.generator, LocalityUUIDGenerator)
    assert_type(TypedEvent.id, UUID7Field)
    assert_type(TypedEvent.id.generator, UUID7Generator)
    assert_type(TypedEvent.token, UUID4Field)
    assert_type(TypedAccount.number, SequenceField)
    assert_type(TypedAccount.number.counter_name(TypedAccount), str)
    assert_type(TypedTicket.code, RandomUniqueField)
    assert_type(TypedTicket.code.space_size, int)

    # A UUID key read on the class is the field's twin for MongoEngine's references (see
    # seam.key_for_references): an instance of the field's class, with the field's attributes.
    assert isinstance(TypedPlace.id, LocalityUUIDField)
    assert isinstance(TypedPlace.id.generator, LocalityUUIDGenerator)
    assert TypedPlace.id.generator is TypedPlace._fields["id"].generator
    assert isinstance(TypedEvent.id, UUID7Field)
    assert type(TypedEvent.token) is UUID4Field
    assert type(TypedAccount.number) is SequenceField
    assert TypedAccount.number.counter_name(TypedAccount) == "typed_accounts.number"
    assert type(TypedTicket.code) is RandomUniqueField
    assert TypedTicket.code.space_size == 90_000_000


def test_assignment_stays_as_loose_as_at_run_time(mongoengine_db: Any) -> None:
    place = TypedPlace(name="a").save()
    again = TypedPlace()
    again.id = str(place.id)  # text, UUIDs, BSON Binary: converted on assignment
    assert again.id == place.id


def test_a_sequence_reached_through_the_class_is_typed(mongoengine_db: Any) -> None:
    sequence = TypedAccount.number.sequence_for(mongoengine_db, TypedAccount)
    assert_type(sequence, Sequence)
    assert_type(sequence.next(), int)
    assert sequence.next() >= 1


def test_the_typing_adds_nothing_at_run_time() -> None:
    for field_class in (GeneratedField, SequenceField, RandomUniqueField):
        assert field_class.__get__ is BaseField.__get__, field_class
    # The UUID fields' own __get__ is for references (seam.key_get), not for the typing.
    for field_class in (UUIDValueField, LocalityUUIDField, UUID4Field, UUID7Field):
        assert field_class.__get__ is seam.key_get, field_class
