"""Upserts combining keywords and a caller's ``__raw__``: the order MongoEngine applies them in is
kept, and the value a field is told of is the value stored; a model's staticmethod
drop_collection. Plain MongoEngine is the reference."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import mongoengine as me
import pytest
from _write_support import raw_collection
from mongoengine.errors import InvalidQueryError

from mongoengine_ids import RandomUniqueField, SequenceField, UUID4Field

# -- the caller's __raw__, given after keywords, wins as in MongoEngine -----------------------


@pytest.mark.parametrize(
    ("update", "field", "expected_field"),
    [
        # the same path in a keyword and in __raw__ given after it
        ({"set__other": "kw", "__raw__": {"$set": {"other": "raw"}}}, "other", "other"),
        ({"inc__cnt": 5, "__raw__": {"$inc": {"cnt": 1}}}, "cnt", "cnt"),
    ],
)
def test_upsert_raw_after_keywords_wins_as_in_plain_mongoengine(
    mongoengine_db: Any, update: dict[str, Any], field: str, expected_field: str
) -> None:
    """MongoEngine applies the update keywords in the order given: a ``__raw__`` after a keyword
    writing the same path wins (0.29 merges it in last; 0.27 replaces the operator). The values
    the package adds on insert leave that order as it is."""

    class XPlain(me.Document):
        name = me.StringField()
        other = me.StringField()
        cnt = me.IntField()
        meta = {"collection": "x_plain"}

    class XGen(me.Document):
        number = SequenceField(sequence_name="x_gen")
        name = me.StringField()
        other = me.StringField()
        cnt = me.IntField()
        meta = {"collection": "x_gen"}

    results = {}
    for model in (XPlain, XGen):
        model(name="a", other="before", cnt=10).save()
        model.objects(name="a").update_one(upsert=True, **dict(update))
        stored = model._get_collection().find_one({"name": "a"})
        results[model.__name__] = stored[field]
    assert results["XGen"] == results["XPlain"]


# -- the value told to a reserve_in field is the value written ---------------------------------


def test_upsert_reserve_in_stores_the_value_it_reserved(mongoengine_db: Any) -> None:
    """An upsert giving a reserve_in field a value both by keyword and by a later ``__raw__``: the
    value reserved is the one stored (the ``__raw__``'s, as plain MongoEngine stores), never
    drawn again later."""

    class XRes(me.Document):
        code = RandomUniqueField(digits=1, reserve_in="x_res_proxy")
        token = UUID4Field()  # empty: the package adds it, moving __raw__ first
        name = me.StringField()
        meta = {"collection": "x_res"}

    XRes.objects(name="up").update_one(upsert=True, set__code=7, __raw__={"$set": {"code": 9}})
    stored = mongoengine_db.x_res.find_one({"name": "up"})
    reserved = {d["_id"] for d in mongoengine_db.x_res_proxy.find()}
    assert stored["code"] in reserved, (stored["code"], reserved)
    # fill the rest of the space: every value must be held once
    for i in range(8):
        try:
            XRes(name=f"s{i}").save()
        except Exception:
            break
    codes = [d["code"] for d in mongoengine_db.x_res.find()]
    assert len(codes) == len(set(codes)), sorted(codes)


def test_upsert_scope_counted_is_the_scope_written(mongoengine_db: Any) -> None:
    """The same for a scoped counter: the scope whose counter numbers the document is the scope
    stored (tenant b, the ``__raw__`` given last): no number of a tenant twice."""

    class XTicket(me.Document):
        tenant = me.StringField()
        number = SequenceField(scope="tenant", sequence_name="x_ticket")
        name = me.StringField()
        meta = {"collection": "x_tickets"}

    for i in range(3):
        XTicket(tenant="a", name=f"a{i}").save()  # tenant a's counter at 3
        XTicket(tenant="b", name=f"b{i}").save()  # tenant b's counter at 3
    XTicket.objects(name="up").update_one(
        upsert=True, set__tenant="a", __raw__={"$set": {"tenant": "b"}}
    )
    XTicket(tenant=mongoengine_db.x_tickets.find_one({"name": "up"})["tenant"], name="next").save()
    by_tenant: dict[str, list[int]] = {}
    for d in mongoengine_db.x_tickets.find():
        by_tenant.setdefault(d["tenant"], []).append(d["number"])
    for tenant, numbers in by_tenant.items():
        assert len(numbers) == len(set(numbers)), (tenant, sorted(numbers))


# -- a model's drop_collection written as a staticmethod -------------------------------------


def test_staticmethod_drop_collection_of_a_model_without_generated_fields(
    mongoengine_db: Any,
) -> None:
    """A model (with no generated field) whose drop_collection is a staticmethod (refusing to
    drop in production, say) is called as written."""

    class XWithIds(me.Document):
        number = SequenceField(sequence_name="x_with_ids")
        meta = {"collection": "x_with_ids"}

    class XGuarded(me.Document):
        name = me.StringField()
        meta = {"collection": "x_guarded"}

        @staticmethod
        def drop_collection() -> str:  # type: ignore[override]
            return "refused"

    assert XWithIds._fields["number"] is not None
    assert XGuarded.drop_collection() == "refused"


# -- review AM: a raw value an upsert would insert as it is -------------------------------------


class XRawKey(me.Document):
    id = SequenceField(primary_key=True, sequence_name="x_raw_key")
    code = SequenceField(sequence_name="x_raw_code", prefix="AC-")
    name = me.StringField()
    meta = {"collection": "x_raw_keys"}


@pytest.mark.parametrize(
    "raw",
    [
        {"_id": "11"},  # the filter fixes the key as text
        {"code": 9},  # an int for a formatted counter, which stores "AC-9"
    ],
)
def test_an_upsert_inserting_a_raw_value_not_in_stored_form_is_refused(
    mongoengine_db: Any, raw: dict[str, Any]
) -> None:
    """It was inserted as given: ``"11"`` beside the ``11`` the counter then handed out (two
    documents for number 11; ``objects(id=11)`` finds one)."""
    with pytest.raises(me.ValidationError, match="stores it as"):
        XRawKey.objects(__raw__=raw).update_one(upsert=True, set__name="raw")
    with pytest.raises(me.ValidationError, match="stores it as"):
        XRawKey.objects(name="n").update_one(
            upsert=True, __raw__={"$setOnInsert": raw, "$set": {"name": "n"}}
        )
    assert list(mongoengine_db.x_raw_keys.find()) == []


def test_an_upsert_given_the_value_through_the_field_inserts_its_stored_form(
    mongoengine_db: Any,
) -> None:
    XRawKey.objects(id="11").update_one(upsert=True, set__name="kw")
    XRawKey.objects(__raw__={"_id": 12, "code": "AC-9"}).update_one(upsert=True, set__name="r")
    stored = sorted(mongoengine_db.x_raw_keys.find(), key=lambda doc: doc["_id"])
    assert [(doc["_id"], doc["code"]) for doc in stored] == [(11, "AC-1"), (12, "AC-9")]
    assert XRawKey(name="next").save().id == 13


def test_an_upsert_by_a_stored_key_object_is_accepted(mongoengine_db: Any) -> None:
    """Review AP: a StoredUUID (what references hold: the stored Binary) was refused."""
    from mongoengine_ids import LocalityUUIDField

    class XStoredKey(me.Document):
        id = LocalityUUIDField(primary_key=True)
        name = me.StringField()
        meta = {"collection": "x_stored_keys"}

    doc = XStoredKey(name="first").save()
    key = XStoredKey.id.reference_key(doc.id)
    XStoredKey.objects(__raw__={"_id": key}).update_one(upsert=True, set__name="again")
    assert [d["name"] for d in mongoengine_db.x_stored_keys.find()] == ["again"]


# -- a raw update (not an upsert) writes its values as given too --------------------------------


class XRawPart(me.EmbeddedDocument):
    label = me.StringField()
    code = SequenceField(sequence_name="x_raw_part", unique=True)


class XRawUpdated(me.Document):
    number = SequenceField(sequence_name="x_raw_number", unique=True)
    pick = RandomUniqueField(digits=1)
    one = me.EmbeddedDocumentField(XRawPart)
    parts = me.ListField(me.EmbeddedDocumentField(XRawPart))
    meta = {"collection": "x_raw_updated"}


@pytest.mark.parametrize(
    "raw",
    [
        {"$set": {"number": "7"}},  # text for a counter, which stores 7
        {"$set": {"pick": "6"}},
        {"$set": {"one.code": "60"}},  # by a path into an embedded document
        {"$set": {"one": {"label": "w", "code": "50"}}},  # an embedded document whole
        {"$push": {"parts": {"label": "w", "code": "70"}}},
    ],
)
def test_an_update_writing_a_raw_value_not_in_stored_form_is_refused(
    mongoengine_db: Any, raw: dict[str, Any]
) -> None:
    """As for an upsert: the text was stored as given, which the field's queries and its unique
    index never match with the number it then handed out (two documents held 6)."""
    saved = XRawUpdated(one=XRawPart(label="o"), parts=[XRawPart(label="p")]).save()
    before = list(mongoengine_db.x_raw_updated.find())
    counters = list(mongoengine_db["mongoengine.counters"].find())
    with pytest.raises(me.ValidationError, match="stores it as"):
        XRawUpdated.objects(id=saved.id).update_one(__raw__=raw)
    assert list(mongoengine_db.x_raw_updated.find()) == before
    assert list(mongoengine_db["mongoengine.counters"].find()) == counters
    # In stored form (or by keyword, which converts it), the value is written and told.
    XRawUpdated.objects(id=saved.id).update_one(__raw__={"$set": {"number": 7, "one.code": 60}})
    stored = mongoengine_db.x_raw_updated.find_one()
    assert (stored["number"], stored["one"]["code"]) == (7, 60)
    assert XRawUpdated().save().number == 8


@pytest.mark.parametrize("upsert", [False, True])
@pytest.mark.parametrize(
    "raw",
    [
        {"$set": {"one": {"label": "z", "code": None}}},
        {"$push": {"parts": {"label": "y", "code": None}}},
        {"$set": {"parts.0": {"label": "x", "code": None}}},
    ],
)
def test_a_null_given_inside_an_embedded_document_written_whole_is_refused(
    mongoengine_db: Any, raw: dict[str, Any], upsert: bool
) -> None:
    """As by a path (``one.code``): null is a value to a unique index. It was stored, and an
    upsert inserted a document holding it."""
    saved = XRawUpdated(one=XRawPart(label="o"), parts=[XRawPart(label="p")]).save()
    before = list(mongoengine_db.x_raw_updated.find())
    query = XRawUpdated.objects(**({"pick": 9} if upsert else {"id": saved.id}))
    with pytest.raises(me.errors.InvalidQueryError, match="gives it None"):
        query.update_one(upsert=upsert, __raw__=raw)
    assert list(mongoengine_db.x_raw_updated.find()) == before


@pytest.mark.parametrize(
    "how",
    [
        {"__raw__": {"$setOnInsert": {"one.code": "5"}}},  # by a path, on insert
        {"__raw__": {"$set": {"one.label": "l"}}, "filter": {"one.code": "7"}},  # in the filter
    ],
    ids=["set-on-insert", "filter"],
)
def test_an_upsert_creating_an_embedded_document_with_a_raw_value_not_in_stored_form_is_refused(
    mongoengine_db: Any, how: dict[str, Any]
) -> None:
    """The embedded document an upsert's insert creates gets the value as given: text beside
    the field's numbers, which its queries never match."""
    update = dict(how)
    query = XRawUpdated.objects(__raw__=update.pop("filter", {"pick": 3}))
    with pytest.raises(me.ValidationError, match="stores it as"):
        query.update_one(upsert=True, **update)
    assert list(mongoengine_db.x_raw_updated.find()) == []
    assert list(mongoengine_db["mongoengine.counters"].find()) == []


# -- a value written through $[] or $[x] lands in every item they match -------------------------


class Slip(me.EmbeddedDocument):
    code = RandomUniqueField(digits=3, reserve_in="slip_codes")
    number = SequenceField(sequence_name="slip_numbers")
    label = me.StringField()


class Tray(me.Document):
    name = me.StringField()
    slips = me.ListField(me.EmbeddedDocumentField(Slip))
    meta = {"collection": "trays"}


@pytest.mark.parametrize(
    ("update", "path"),
    [
        ({"$set": {"slips.$[].code": 555}}, "slips.$[].code"),
        ({"$set": {"slips.$[s].code": 555}}, "slips.$[s].code"),
        ({"$set": {"slips.$[]": {"label": "z", "code": 555}}}, "slips.$[].code"),
    ],
)
def test_a_unique_value_written_into_every_item_is_refused(
    mongoengine_db: Any, update: dict[str, Any], path: str
) -> None:
    """The server writes a value given through ``$[]`` (or ``$[x]``, by ``array_filters``) into
    every item matched: two slips of one tray would hold one ``reserve_in`` code, reserved once.
    Refused before anything is sent or reserved. (mongomock cannot apply ``$[]``: what is
    checked is that nothing was written.)"""
    Tray(name="t", slips=[Slip(label="a"), Slip(label="b")]).save()
    stored = list(mongoengine_db.trays.find())
    reserved = list(mongoengine_db.slip_codes.find())
    with pytest.raises(me.NotUniqueError) as raised:
        Tray.objects(name="t").update_one(__raw__=update)
    assert f"writes 555 at {path!r}" in str(raised.value)
    assert "every item" in str(raised.value)
    assert list(mongoengine_db.trays.find()) == stored
    assert list(mongoengine_db.slip_codes.find()) == reserved


def test_a_value_that_may_repeat_may_be_written_into_every_item(mongoengine_db: Any) -> None:
    """A value of a field whose values may repeat (a ``SequenceField`` that is not unique takes
    the numbers it is given) is the user's to give, as anywhere else: told, and sent."""
    Tray(name="t", slips=[Slip(label="a"), Slip(label="b")]).save()
    sent: list[Any] = []
    collection = Tray._get_collection()
    update_one = type(collection).update_one

    def spy(self: Any, query: Any, update: Any, *args: Any, **kwargs: Any) -> Any:
        if self.name != "trays":  # the counter, told of the number
            return update_one(self, query, update, *args, **kwargs)
        sent.append(update)
        raise RuntimeError("stop: mongomock cannot apply $[]")

    type(collection).update_one = spy
    try:
        with pytest.raises(RuntimeError, match="stop"):
            Tray.objects(name="t").update_one(__raw__={"$set": {"slips.$[].number": 7}})
    finally:
        type(collection).update_one = update_one
    assert sent == [{"$set": {"slips.$[].number": 7}}]
    Tray(name="next", slips=[Slip(label="c")]).save()  # 7 was told: never handed out
    assert mongoengine_db.trays.find_one({"name": "next"})["slips"][0]["number"] == 8


# -- update pipelines (__raw__=[...]) ----------------------------------------------------------


class PipeLine(me.EmbeddedDocument):
    label = me.StringField()
    code = RandomUniqueField(digits=4, reserve_in="pipe_line_codes")


class PipeTicket(me.Document):
    number = SequenceField(sequence_name="pipe_ticket")
    name = me.StringField()
    note = me.StringField()
    lines = me.ListField(me.EmbeddedDocumentField(PipeLine))
    meta = {"collection": "pipe_tickets"}


@pytest.mark.parametrize(
    ("pipeline", "written"),
    [
        # a number the counter would hand out again
        ([{"$set": {"number": 5}}], r"writes 'number' \(PipeTicket.number holds generated"),
        ([{"$addFields": {"number": {"$add": ["$number", 1]}}}], "'number'"),
        ([{"$project": {"number": {"$literal": 3}}}], "removes every field it does not name"),
        ([{"$project": {"name": "$note"}}], "removes every field it does not name"),
        # a copy of the embedded documents: each reserved code stored twice
        ([{"$set": {"lines": {"$concatArrays": ["$lines", "$lines"]}}}], "'lines'"),
        ([{"$set": {"lines.code": 7}}], r"'lines.code' \(PipeLine.code holds"),
        ([{"$set": {"name": "b"}}, {"$replaceWith": {"name": "z"}}], "writes the whole document"),
        ([{"$replaceRoot": {"newRoot": {"name": "z"}}}], "writes the whole document"),
        # an inclusion removes every field it does not name
        ([{"$project": {"name": 1}}], "removes every field it does not name"),
        ([{"$project": {"_id": 1}}], "removes every field it does not name"),  # review E
        # a stage given as another mapping than a dict (review C)
        ([MappingProxyType({"$set": {"number": 5}})], "writes 'number'"),
    ],
)
@pytest.mark.parametrize("how", ["update_one", "update", "document"])
def test_a_pipeline_writing_generated_values_is_refused_before_anything_is_written(
    mongoengine_db: Any, pipeline: list[dict[str, Any]], written: str, how: str
) -> None:
    """A pipeline computes on the server what it writes: the field neither made nor checked
    it. Refused, as ``inc__number`` is; the same values given by an update document are told."""
    ticket = PipeTicket(name="a", lines=[PipeLine(label="x")]).save()
    before = list(mongoengine_db.pipe_tickets.find())
    counters = list(mongoengine_db["mongoengine.counters"].find())
    updates = {
        "update_one": lambda: PipeTicket.objects(id=ticket.id).update_one(__raw__=pipeline),
        "update": lambda: PipeTicket.objects.update(__raw__=pipeline),
        "document": lambda: ticket.update(__raw__=pipeline),
    }
    with pytest.raises(
        InvalidQueryError, match=rf"the \$\w+ stage of an update pipeline.*{written}"
    ):
        updates[how]()
    assert list(mongoengine_db.pipe_tickets.find()) == before
    assert list(mongoengine_db["mongoengine.counters"].find()) == counters


def test_a_pipeline_writing_other_fields_runs_as_in_plain_mongoengine(mongoengine_db: Any) -> None:
    """Stages that write no generated value (other fields, a copy of one into another field,
    a removal) are sent as given: the next number is the counter's next."""
    ticket = PipeTicket(name="a", lines=[PipeLine(label="x")]).save()
    assert PipeTicket.objects(id=ticket.id).update_one(
        __raw__=[{"$set": {"note": {"$concat": ["$name", "!"]}}}, {"$project": {"lines": 0}}]
    )
    PipeTicket.objects(id=ticket.id).update_one(__raw__=[{"$addFields": {"name": "$note"}}])
    stored = mongoengine_db.pipe_tickets.find_one({"_id": ticket.id})
    assert stored == {"_id": ticket.id, "number": 1, "name": "a!", "note": "a!"}
    assert PipeTicket(name="b").save().number == 2


class PipeScopedLine(me.EmbeddedDocument):
    kind = me.StringField()
    no = SequenceField(sequence_name="pipe_scoped_line", scope="kind")


class PipeScoped(me.Document):
    id = UUID4Field(primary_key=True)
    tenant = me.StringField()
    number = SequenceField(sequence_name="pipe_scoped", scope="tenant")
    lines = me.ListField(me.EmbeddedDocumentField(PipeScopedLine))
    name = me.StringField()
    meta = {"collection": "pipe_scoped"}


@pytest.mark.parametrize(
    ("pipeline", "written"),
    [
        # numbers moved to another scope untold: handed out there again (review C)
        ([{"$set": {"tenant": "D"}}], r"writes 'tenant' \(PipeScoped.number is numbered per it\)"),
        ([{"$unset": "tenant"}], r"removes 'tenant' \(PipeScoped.number is numbered per it\)"),
        ([{"$project": {"tenant": 0}}], "removes 'tenant'"),
        (
            [{"$set": {"lines.kind": "z"}}],
            r"writes 'lines.kind' \(PipeScopedLine.no is numbered per it\)",
        ),
        ([{"$replaceWith": {"name": "z"}}], r"the whole document \(PipeScoped.tenant"),
    ],
)
def test_a_pipeline_changing_a_scope_is_refused(
    mongoengine_db: Any, pipeline: list[dict[str, Any]], written: str
) -> None:
    scoped = PipeScoped(tenant="A", name="a", lines=[PipeScopedLine(kind="k")]).save()
    before = list(mongoengine_db.pipe_scoped.find())
    with pytest.raises(InvalidQueryError, match=written):
        PipeScoped.objects(id=scoped.id).update_one(__raw__=pipeline)
    assert list(mongoengine_db.pipe_scoped.find()) == before


def test_a_pipeline_leaving_the_key_alone_runs_when_the_key_is_the_only_generated_value(
    mongoengine_db: Any,
) -> None:
    """No update changes a key: a stage projecting the whole document keeps it (review C)."""

    class PipeKeyed(me.Document):
        id = UUID4Field(primary_key=True)
        name = me.StringField()
        other = me.StringField()
        meta = {"collection": "pipe_keyed"}

    keyed = PipeKeyed(name="a", other="o").save()
    assert PipeKeyed.objects(id=keyed.id).update_one(__raw__=[{"$project": {"name": 1}}]) == 1
    assert raw_collection(mongoengine_db.pipe_keyed).find_one() == {
        "_id": keyed.to_mongo()["_id"],
        "name": "a",
    }


def test_a_pipeline_upsert_writing_a_generated_value_is_refused(mongoengine_db: Any) -> None:
    """The filter fixes the number (so the upsert may insert), the pipeline would write it."""
    with pytest.raises(InvalidQueryError, match=r"\$set stage.*'number'"):
        PipeTicket.objects(number=3).update_one(upsert=True, __raw__=[{"$set": {"number": 4}}])
    assert list(mongoengine_db.pipe_tickets.find()) == []


class PipeBase(me.Document):
    name = me.StringField()
    meta = {"collection": "pipe_bases", "allow_inheritance": True}


class PipeSub(PipeBase):
    lines = me.ListField(me.EmbeddedDocumentField(PipeLine))


@pytest.mark.parametrize(
    ("pipeline", "written"),
    [
        ([{"$replaceWith": {"name": "z"}}], r"the whole document \(PipeSub.lines holds"),
        ([{"$set": {"lines": {"$concatArrays": ["$lines", "$lines"]}}}], r"\(PipeSub.lines holds"),
    ],
)
def test_a_pipeline_through_a_base_class_reaches_its_subclasses_values(
    mongoengine_db: Any, pipeline: list[dict[str, Any]], written: str
) -> None:
    """The base declares no generated field; the documents its queryset matches may."""
    sub = PipeSub(name="a", lines=[PipeLine(label="x")]).save()
    before = list(mongoengine_db.pipe_bases.find())
    with pytest.raises(InvalidQueryError, match=written):
        PipeBase.objects(id=sub.id).update_one(__raw__=pipeline)
    assert list(mongoengine_db.pipe_bases.find()) == before
