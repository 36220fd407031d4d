"""A network error at every database call of a write of embedded documents, in turn.

The same method as ``test_faults_exhaustive.py`` (whose fault injector and retry loop this
shares: :mod:`_faults`), for generated fields declared on an embedded document: a counter
(``SequenceField``), a random value reserved in a proxy collection (``RandomUniqueField``
with ``reserve_in``, 6 of its 12 values taken) and a UUID; the first two also declared on a
subclass of the class the model names, held by a ``GenericEmbeddedDocumentField``, and in a
``DynamicEmbeddedDocument`` of a ``DynamicDocument``. Each write (a new document's
``save()``, a bulk ``insert()``, ``save()`` of a loaded document with an item appended,
``update_one(push__...)``, an upsert setting one, ``modify(push__...)``) runs once to count
its database calls, N; then, for every call k < N and every mode (the call never sent, its
reply lost, applied late, the process interrupted), on a fresh database holding the same
documents, and is retried as an application would. The raw stored documents are checked
(:func:`_violations`):

1. every pre-existing document is unchanged, apart from the items the write adds to it;
2. no document is stored twice, nor one of no known name; each one the write made is stored
   once if it returned;
3. no generated value is held by two stored embedded documents;
4. every embedded document the write stored holds a valid generated value;
5. each embedded document of the write is stored at most once, once if the write returned;
6. if the write returned, the Python embedded documents hold the stored values;
7. every stored value is known to its field: reserved in the proxy collection, or at or below
   the counter (else a later write could make it again);
8. a retry refused as a duplicate (after a ``ConnectionFailure``) stored the write's items.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import mongoengine as me
import pytest
from _faults import (
    ACCEPTABLE,
    Faults,
    Outcome,
    StoredValues,
    draw,
    draws,
    modes_for,
    retrying,
)
from _support import CLIENT_OPTIONS, TEST_URI
from _write_support import raw_collection
from bson.binary import Binary

from mongoengine_ids import (
    LocalityUUIDField,
    LocalityUUIDGenerator,
    RandomUniqueField,
    SequenceField,
    UUID4Field,
    backfill,
)
from mongoengine_ids.sequence.field import counter_id
from mongoengine_ids.testing import connected_threadsafe


@dataclass(frozen=True)
class Case:
    """A generated field of an embedded document, and the values stored items hold in it."""

    kind: str
    make: Callable[[], Any]
    existing: tuple[Any, ...]
    #: The proxy collection that reserves its values, or the counter document that counts them.
    proxy: str | None = None
    counter: str | None = None
    #: How the model holds the embedded class: "plain" (``EmbeddedDocumentField(Part)``),
    #: "subclass" (the field declared on a subclass of the class the model names), "generic"
    #: (``GenericEmbeddedDocumentField(choices=[Part])``), "dynamic" (a ``DynamicDocument``
    #: holding a ``DynamicEmbeddedDocument``).
    shape: str = "plain"

    @property
    def name(self) -> str:
        return self.kind if self.shape == "plain" else f"{self.kind}-{self.shape}"


CASES = [
    Case(
        "sequence",
        lambda: SequenceField(sequence_name="fe_counted"),
        (1, 2, 3),
        counter="fe_counted.code",  # MongoEngine's name: the sequence's, then the field's
    ),
    Case(
        "reserved",
        lambda: RandomUniqueField(
            min_value=1,
            max_value=12,
            max_retries=40,
            rng=draw,
            warn_collision_rate=1.0,
            reserve_in="fe_reserved",
        ),
        (1, 2, 3, 5, 7, 11),
        "fe_reserved",
    ),
    Case("uuid4", UUID4Field, tuple(uuid.uuid4() for _ in range(3))),
    Case(
        "scoped",
        lambda: SequenceField(scope="kind", sequence_name="fe_scoped"),
        (1, 2, 3),
        counter=counter_id("fe_scoped.code", scope="k"),
    ),
    Case("locality", LocalityUUIDField, tuple(LocalityUUIDGenerator(pid=4242).generate_many(3))),
]
# The same fields held through inheritance, a generic field and dynamic documents (probes K, L
# and N found values there made twice, or not told).
CASES += [
    Case(**{**vars(case), "shape": shape})
    for case in CASES
    if case.kind in ("sequence", "reserved")
    for shape in ("subclass", "generic", "dynamic")
]


@cache
def _models(case: Case) -> tuple[type[me.EmbeddedDocument], type[me.Document]]:
    """The embedded class of ``case`` (``code``, ``label``) and the model holding it."""
    title = case.name.title().replace("-", "")
    fields = {
        "code": case.make(),
        "label": me.StringField(),
        **({"kind": me.StringField(default="k")} if case.kind == "scoped" else {}),
    }
    document_base: type[me.Document] = me.Document
    if case.shape == "subclass":
        named = type(
            f"FaultsEmbedded{title}Base",
            (me.EmbeddedDocument,),
            {"label": fields.pop("label"), "meta": {"allow_inheritance": True}},
        )
        part = type(f"FaultsEmbedded{title}Part", (named,), fields)
    elif case.shape == "dynamic":
        part = named = type(f"FaultsEmbedded{title}Part", (me.DynamicEmbeddedDocument,), fields)
        document_base = me.DynamicDocument
    else:
        part = named = type(f"FaultsEmbedded{title}Part", (me.EmbeddedDocument,), fields)
    holder: Callable[[], Any] = (
        (lambda: me.GenericEmbeddedDocumentField(choices=[part]))
        if case.shape == "generic"
        else (lambda: me.EmbeddedDocumentField(named))
    )
    box = type(
        f"FaultsEmbedded{title}Box",
        (document_base,),
        {
            "meta": {"collection": f"faults_embedded_{case.name}"},
            "name": me.StringField(),
            "part": holder(),
            "parts": me.ListField(holder()),
        },
    )
    return part, box


def _stored_value(value: Any) -> Any:
    return Binary(value.bytes, 4) if isinstance(value, uuid.UUID) else value


def _existing(case: Case) -> list[dict[str, Any]]:
    """Two stored documents holding the case's values: ``pre-0`` in its list, ``pre-1`` in its
    single item and its list."""
    values = [_stored_value(value) for value in case.existing]
    half = len(values) // 2
    if case.kind == "scoped":
        return [
            {"name": "pre-0", "parts": [{"kind": "k", "code": 1, "label": "old-0"}]},
            {
                "name": "pre-1",
                "part": {"kind": "k", "code": 2, "label": "old-single"},
                "parts": [{"kind": "k", "code": 3, "label": "old-2"}],
            },
        ]
    # A subclass's or a generic field's items name their class.
    named = {"_cls": _models(case)[0]._class_name} if case.shape in ("subclass", "generic") else {}
    return [
        {
            "name": "pre-0",
            "parts": [
                {**named, "code": v, "label": f"old-{i}"} for i, v in enumerate(values[:half])
            ],
        },
        {
            "name": "pre-1",
            "part": {**named, "code": values[half], "label": "old-single"},
            "parts": [
                {**named, "code": v, "label": f"old-{half + 1 + i}"}
                for i, v in enumerate(values[half + 1 :])
            ],
        },
    ]


# -- the writes ---------------------------------------------------------------------------------


@dataclass
class Write:
    """One write, ready to run (and run again) with the same Python objects."""

    #: Makes the write; returns nothing of interest (the parts are checked).
    call: Callable[[], list[Any]]
    #: The embedded documents it writes (labelled ``new-*``), to find in the stored ones.
    parts: list[Any]
    #: Names of the documents it makes.
    names: list[str] = field(default_factory=list)
    #: Labels of stored embedded documents it replaces.
    replaces: set[str] = field(default_factory=set)
    #: Labels of embedded documents an upsert creates from its filter or a path (no object).
    created: set[str] = field(default_factory=set)


def _save_new(part: Any, box: Any) -> Write:
    parts = [part(label="new-a"), part(label="new-b"), part(label="new-c")]
    document = box(name="new-0", parts=parts[:2], part=parts[2])
    return Write(lambda: [document.save()], parts, ["new-0"])


def _insert(part: Any, box: Any) -> Write:
    parts = [part(label="new-a"), part(label="new-b"), part(label="new-c")]
    documents = [box(name="new-0", parts=parts[:2]), box(name="new-1", part=parts[2])]
    return Write(lambda: box.objects.insert(documents, load_bulk=False), parts, ["new-0", "new-1"])


def _save_appended(part: Any, box: Any) -> Write:
    loaded = box.objects.get(name="pre-0")
    added = part(label="new-a")
    loaded.parts.append(added)
    return Write(lambda: [loaded.save()], [added])


def _update_push(part: Any, box: Any) -> Write:
    added = part(label="new-a")
    return Write(lambda: [box.objects(name="pre-0").update_one(push__parts=added)], [added])


def _upsert_set(part: Any, box: Any) -> Write:
    added = part(label="new-a")

    def call() -> list[Any]:
        return [box.objects(name="up-0").update_one(upsert=True, set__part=added)]

    return Write(call, [added], ["up-0"])


def _modify_push(part: Any, box: Any) -> Write:
    added = part(label="new-a")
    return Write(lambda: [box.objects(name="pre-1").modify(new=True, push__parts=added)], [added])


def _update_set_item(part: Any, box: Any) -> Write:
    added = part(label="new-a")
    call = lambda: [box.objects(name="pre-0").update_one(set__parts__0=added)]  # noqa: E731
    return Write(call, [added], replaces={"old-0"})


def _upsert_push(part: Any, box: Any) -> Write:
    added = part(label="new-a")

    def call() -> list[Any]:
        return [box.objects(name="up-0").update_one(upsert=True, push__parts=added)]

    return Write(call, [added], ["up-0"])


def _update_counted(part: Any, box: Any) -> Write:
    added = part(label="new-a")  # update() of several, its filter matching one: counted
    return Write(lambda: [box.objects(name="pre-1").update(push__parts=added)], [added])


def _doc_update_push(part: Any, box: Any) -> Write:
    loaded = box.objects.get(name="pre-0")
    added = part(label="new-a")
    return Write(lambda: [loaded.update(push__parts=added)], [added])


def _doc_update_upsert_push(part: Any, box: Any) -> Write:
    loaded = box.objects.get(name="pre-1")
    added = part(label="new-a")
    return Write(lambda: [loaded.update(upsert=True, push__parts=added)], [added])


def _doc_update_upsert_unkeyed(part: Any, box: Any) -> Write:
    """An unsaved document upserted by itself (MongoEngine's filter: its whole to_mongo()):
    its embedded values are made for that filter (probe A: a reserved one was refused)."""
    parts = [part(label="new-a"), part(label="new-b")]
    document = box(name="up-0", part=parts[0], parts=parts[1:])
    return Write(lambda: [document.update(upsert=True, set__name="up-0")], parts, ["up-0"])


def _modify_upsert_push_new(part: Any, box: Any) -> Write:
    added = part(label="new-a")

    def call() -> list[Any]:
        return [box.objects(name="up-0").modify(upsert=True, new=True, push__parts=added)]

    return Write(call, [added], ["up-0"])


def _modify_upsert_push_match(part: Any, box: Any) -> Write:
    added = part(label="new-a")
    return Write(
        lambda: [box.objects(name="pre-1").modify(upsert=True, new=True, push__parts=added)],
        [added],
    )


def _upsert_one_push_all(part: Any, box: Any) -> Write:
    added = [part(label="new-a"), part(label="new-b")]
    return Write(lambda: [box.objects(name="pre-0").upsert_one(push_all__parts=added)], added)


def _modify_push_positional_filter(part: Any, box: Any) -> Write:
    added = part(label="new-a")
    return Write(
        lambda: [
            box.objects(name="pre-1", parts__label__startswith="old").modify(push__parts=added)
        ],
        [added],
    )


def _upsert_on_insert_and_push(name: str) -> Callable[[Any, Any], Write]:
    """An upsert giving one embedded document on insert only and pushing another (review AR:
    its look-up of the unused values, after the write, failed: the retry pushed again)."""

    def make(part: Any, box: Any) -> Write:
        added = [part(label="new-a"), part(label="new-b")]
        query = box.objects(name=name)
        call = lambda: [  # noqa: E731
            query.update_one(upsert=True, set_on_insert__part=added[0], push__parts=added[1])
        ]
        return Write(call, added if name == "up-0" else added[1:], [name] if name == "up-0" else [])

    return make


def _upsert_creating(how: str, name: str = "up-0") -> Callable[[Any, Any], Write]:
    """An upsert whose insert creates the single embedded document from its filter (``filter``:
    ``part__label=``) or from a path of its update (``path``: ``set__part__label=``): its
    generated value is set on insert. (A filter by the whole embedded document is refused.)"""

    def make(part: Any, box: Any) -> Write:
        label = f"new-{how}"
        scope = {"kind": "k"} if "kind" in part._fields else {}  # a scoped counter's
        if how == "filter":
            query = box.objects(
                part__label=label, name=name, **{f"part__{k}": v for k, v in scope.items()}
            )
            update = {"set__name": name}
        else:
            query = box.objects(name=name)
            update = {f"set__part__{k}": v for k, v in {"label": label, **scope}.items()}

        def call() -> list[Any]:
            return [query.update_one(upsert=True, **update)]

        inserts = name == "up-0"
        return Write(call, [], [name] if inserts else [], created={label} if inserts else set())

    return make


def _backfill(part: Any, box: Any) -> Write:
    """``backfill()`` of a stored document whose embedded documents lack their values (the
    field added later), in its single field and its list: one conditional update, by the list
    or the embedded document as read. (Two items: the values of a write whose outcome is
    unknown stay taken, never handed out again, and the reserved case's space holds 12.)"""
    declared = getattr(box._fields["part"], "document_type", None)
    named = {} if declared is part else {"_cls": part._class_name}  # a subclass, a choice
    scope = {"kind": "k"} if "kind" in part._fields else {}
    items = [{**named, **scope, "label": f"legacy-{letter}"} for letter in "ab"]
    box._get_collection().insert_one({"name": "legacy-0", "part": items[0], "parts": items[1:]})
    created = {item["label"] for item in items}
    return Write(lambda: [backfill(box)], [], ["legacy-0"], created=created)


WRITES: dict[str, Callable[[Any, Any], Write]] = {
    "backfill": _backfill,
    "upsert-creating-by-filter": _upsert_creating("filter"),
    "upsert-creating-by-path": _upsert_creating("path"),
    "upsert-on-insert-push-new": _upsert_on_insert_and_push("up-0"),
    "upsert-on-insert-push-match": _upsert_on_insert_and_push("pre-1"),
    "doc-update-push": _doc_update_push,
    "doc-update-upsert-push": _doc_update_upsert_push,
    "doc-update-upsert-unkeyed": _doc_update_upsert_unkeyed,
    "modify-upsert-push-new": _modify_upsert_push_new,
    "modify-upsert-push-match": _modify_upsert_push_match,
    "upsert-one-push-all": _upsert_one_push_all,
    "modify-push-filtered": _modify_push_positional_filter,
    "save": _save_new,
    "insert": _insert,
    "save-appended": _save_appended,
    "update-push": _update_push,
    "upsert-set": _upsert_set,
    "modify-push": _modify_push,
    "update-set-item": _update_set_item,
    "upsert-push": _upsert_push,
    "update-counted": _update_counted,
}


# -- one run ------------------------------------------------------------------------------------


@dataclass
class Run:
    calls: list[str]
    outcome: Outcome
    problems: list[str]


def _run(case: Case, make_write: Callable[[Any, Any], Write], faults: Faults) -> Run:
    """One run on a fresh database: the stored documents, the write (faults armed), checks."""
    part, box = _models(case)
    draws.seed(7)
    with connected_threadsafe(TEST_URI, hook=faults, **CLIENT_OPTIONS) as connect:
        db = connect()
        existing = _existing(case)
        db[box._get_collection_name()].insert_many([dict(document) for document in existing])
        if case.proxy is not None:  # stored through the package: their values are reserved
            db[case.proxy].insert_many([{"_id": v, "ns": "pre"} for v in case.existing])
        if case.counter is not None:
            db["mongoengine.counters"].insert_one({"_id": case.counter, "next": max(case.existing)})
        box._get_collection()
        write = make_write(part, box)
        collection = raw_collection(db[box._get_collection_name()])
        stored_values = StoredValues(faults, lambda: _codes_by_label(collection), "code")
        faults.armed = True
        try:
            outcome = retrying(write.call, stored_values.between)
        finally:
            faults.armed = False
            faults.land()
        stored = list(collection.find({}, {"_id": 0}))
        problems = _violations(case, db, write, existing, stored, outcome)
        problems.extend(stored_values.problems())
    box._collection = None
    return Run(faults.calls, outcome, problems)


def _items(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [*([document["part"]] if document.get("part") else []), *document.get("parts", [])]


def _codes_by_label(collection: Any) -> dict[Any, Any]:
    """The stored value of each embedded document, by its label, of labels held once."""
    items = [item for document in collection.find() for item in _items(document)]
    labels = Counter(item.get("label") for item in items)
    return {
        item.get("label"): _key(item.get("code"))
        for item in items
        if labels[item.get("label")] == 1
    }


def _violations(
    case: Case,
    db: Any,
    write: Write,
    existing: list[dict[str, Any]],
    stored: list[dict[str, Any]],
    outcome: Outcome,
) -> list[str]:
    problems: list[str] = []
    returned = outcome.returned
    labels = {p.label for p in write.parts} | write.created
    by_name = {document["name"]: document for document in stored}
    names = Counter(document["name"] for document in stored)
    # 1, 2: the documents
    for before in existing:
        now = by_name.get(before["name"])
        if now is None:
            problems.append(f"1. {before['name']!r} is gone")
            continue
        kept = {key: value for key, value in now.items() if key not in ("part", "parts")}
        kept["parts"] = [item for item in now.get("parts", []) if item.get("label") not in labels]
        if now.get("part") is not None and now["part"].get("label") not in labels:
            kept["part"] = now["part"]
        gone = [i for i in before.get("parts", []) if i["label"] in write.replaces]
        if kept != before and kept != {
            **before,
            "parts": [i for i in before["parts"] if i not in gone],
        }:
            problems.append(f"1. {before['name']!r} is now {now!r}, was {before!r}")
    known = {before["name"] for before in existing} | set(write.names)
    for name, count in names.items():
        if name not in known or count > 1:
            problems.append(f"2. {name!r} stored {count} time(s)")
    if returned:
        problems.extend(f"2. {name!r} not stored" for name in write.names if not names[name])
    # 3, 4, 5: the embedded documents and their values
    items = [item for document in stored for item in _items(document)]
    codes = Counter(_key(item.get("code")) for item in items if item.get("code") is not None)
    problems.extend(f"3. code {code!r} held {n} times" for code, n in codes.items() if n > 1)
    problems.extend(
        f"4. {item!r} holds no generated value"
        for item in items
        if item.get("label") in labels and item.get("code") is None
    )
    placed = Counter(item.get("label") for item in items if item.get("label") in labels)
    problems.extend(f"5. {label!r} stored {n} times" for label, n in placed.items() if n > 1)
    if returned:
        problems.extend(f"5. {label!r} not stored" for label in labels if not placed[label])
    # 6: the Python objects hold the stored values
    if returned:
        stored_code = {item.get("label"): item.get("code") for item in items}
        for p in write.parts:
            if _key(_stored_value(p.code)) != _key(stored_code.get(p.label)):
                problems.append(
                    f"6. {p.label!r}: Python {p.code!r}, stored {stored_code.get(p.label)!r}"
                )
    # 7: every stored value known to its field
    if case.proxy is not None:
        reserved = {document["_id"] for document in db[case.proxy].find()}
        problems.extend(
            f"7. code {code!r} is not reserved" for code in codes if code not in reserved
        )
    if case.counter is not None:
        counter = db["mongoengine.counters"].find_one({"_id": case.counter}) or {}
        problems.extend(
            f"7. code {code!r} is above the counter {counter.get('next')!r}"
            for code in codes
            if code > counter.get("next", 0)
        )
    # 8: a retry refused as a duplicate: the earlier attempt was applied
    ending = outcome.ending
    if outcome.refused_as_duplicate:
        problems.extend(
            f"8. refused as a duplicate ({str(ending)[:60]}...), but {label!r} is not stored"
            for label in labels
            if not placed[label]
        )
    if ending is not None and not isinstance(ending, (*ACCEPTABLE, KeyboardInterrupt)):
        problems.append(f"the write failed with {type(ending).__name__}: {ending}")
    return problems


def _key(value: Any) -> Any:
    """A stored value as a comparable key (a real server decodes a UUID as uuid.UUID)."""
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, Binary):
        return bytes(value)
    return value


# -- the tests ----------------------------------------------------------------------------------

_tally: dict[str, int] = {}


def _applies(case: Case, write_name: str) -> bool:
    """An upsert's insert creates an embedded document of the class its field names: not the
    subclass, nor a generic field's choice, that declares the generated field (documented in
    docs/guarantees.md, Upserts: not covered). MongoEngine's own ``doc.update(upsert=True)``
    of a document without a key fails on a ``GenericEmbeddedDocumentField`` (it filters by the
    field's stored dict, which the field cannot serialise: ``AttributeError``)."""
    if case.shape in ("subclass", "generic") and write_name.startswith("upsert-creating"):
        return False
    return not (case.shape == "generic" and write_name == "doc-update-upsert-unkeyed")


@pytest.mark.parametrize(
    ("case", "write_name"),
    [
        pytest.param(case, name, id=f"{case.name}-{name}")
        for case in CASES
        for name in WRITES
        if _applies(case, name)
    ],
)
def test_a_fault_at_every_call_of_an_embedded_write_never_doubles_a_value(
    case: Case, write_name: str
) -> None:
    make_write = WRITES[write_name]
    baseline = _run(case, make_write, Faults())
    assert baseline.outcome.returned, baseline.outcome.ending
    assert baseline.problems == []
    n = len(baseline.calls)
    failures, runs = [], 0
    for k in range(n):
        for mode in modes_for(baseline.calls[k]):
            run = _run(case, make_write, Faults(k, mode))
            runs += 1
            if run.problems:
                failures.append(f"call {k} ({run.calls[k]}) {mode}: {run.outcome}: {run.problems}")
    _tally[f"{case.name} {write_name}"] = runs
    assert failures == [], f"{len(failures)} failing run(s) of N={n}:\n" + "\n".join(failures)


def test_the_checks_catch_a_value_stored_twice() -> None:
    """The checks themselves: one object placed in two documents written by a raw insert is
    found."""
    case = CASES[1]

    def twice(part: Any, box: Any) -> Write:
        added = part(label="new-a", code=4)

        def call() -> list[Any]:
            raw = added.to_mongo()
            box._get_collection().insert_many(
                [{"name": "new-0", "parts": [raw]}, {"name": "new-1", "parts": [raw]}]
            )
            return []

        return Write(call, [added], ["new-0", "new-1"])

    run = _run(case, twice, Faults())
    assert any(problem.startswith("3. code 4 held 2 times") for problem in run.problems)
    assert any(problem.startswith("5. 'new-a' stored 2 times") for problem in run.problems)
    assert any(problem.startswith("7. code 4 is not reserved") for problem in run.problems)


def test_report_the_number_of_runs(capsys: pytest.CaptureFixture[str]) -> None:
    runs = sum(_tally.values())
    with capsys.disabled():
        print(f"\nembedded fault runs: {runs} over {len(_tally)} (field, write) cases")
