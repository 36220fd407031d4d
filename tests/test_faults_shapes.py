"""The exhaustive fault method on model shapes the other two harnesses do not build (probe BV).

``test_faults_exhaustive.py`` runs one generated field per model, with a sequence leasing one
value at a time; ``test_faults_embedded.py`` the fields of embedded documents. Here, with the
same injector and retry loop (:mod:`_faults`): a fault at every database call of the write in
turn, in each of :data:`_faults.MODES` (``concern`` at a write only), then again with a call
held back ("late") and a second fault at every later call; the application retries as there.
Collisions are forced by documents stored past the counters. The shapes:

* ``scoped``: a top-level ``SequenceField(scope="tenant", unique_with="tenant")``; tenant A holds
  1 to 3, B holds 1. Writes: save, bulk insert (both tenants), the three upserts, save of a
  loaded document whose stored copy lacks the number, and ``backfill()``;
* ``two``: two generated fields, a sequence key (1 to 3 taken) and a ``RandomUniqueField`` over
  a space of 12 whose draws are scripted (5, 7, 11 taken);
* ``embedded_unique``: an embedded ``SequenceField(unique=True)``, whose unique index on its
  place (``line.no``) refuses numbers 1 to 3;
* ``batch``: a sequence key leased 5 at a time (1 to 3 taken).

After each run the raw stored documents are checked: the pre-existing ones unchanged, no
logical document (``key``) stored twice or unknown, no value held twice (per scope), every
document the write stored holding its value, at or below its counter, the Python values equal
to the stored ones if the write returned, and a retry refused only as a duplicate.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import mongoengine as me
import pymongo.errors
import pytest
from _faults import ACCEPTABLE, Faults, Outcome, concern_failed, draw, draws, modes_for, retrying
from _support import CLIENT_OPTIONS, TEST_URI

from mongoengine_ids import RandomUniqueField, SequenceField, backfill
from mongoengine_ids.testing import connected_threadsafe


class FsScoped(me.Document):
    key = me.StringField()
    tenant = me.StringField()
    n = SequenceField(scope="tenant", unique_with="tenant", sequence_name="fs_scoped")
    meta = {"collection": "fs_scoped"}


class FsTwo(me.Document):
    id = SequenceField(primary_key=True, sequence_name="fs_two")
    code = RandomUniqueField(
        min_value=1, max_value=12, max_retries=40, rng=draw, warn_collision_rate=1.0
    )
    key = me.StringField()
    meta = {"collection": "fs_two"}


class FsLine(me.EmbeddedDocument):
    no = SequenceField(unique=True, sparse=True, sequence_name="fs_line")
    label = me.StringField()


class FsBox(me.Document):
    key = me.StringField()
    line = me.EmbeddedDocumentField(FsLine)
    meta = {"collection": "fs_box"}


class FsBatch(me.Document):
    id = SequenceField(primary_key=True, batch_size=5, sequence_name="fs_batch")
    key = me.StringField()
    meta = {"collection": "fs_batch"}


#: The pre-existing documents of each shape, as stored: they hold the counters' next values.
EXISTING: dict[type[me.Document], list[dict[str, Any]]] = {
    FsScoped: [
        *({"key": f"pre-{i}", "tenant": "A", "n": i} for i in (1, 2, 3)),
        {"key": "pre-b", "tenant": "B", "n": 1},
    ],
    FsTwo: [
        *({"_id": i, "key": f"pre-{i}", "code": i} for i in (1, 2, 3)),
        *({"_id": 50 + code, "key": f"pre-c{code}", "code": code} for code in (5, 7, 11)),
    ],
    FsBox: [{"key": f"pre-{i}", "line": {"no": i, "label": "old"}} for i in (1, 2, 3)],
    FsBatch: [{"_id": i, "key": f"pre-{i}"} for i in (1, 2, 3)],
}

#: (the call, the keys of the logical documents it writes, the Python documents whose values
#: must be the stored ones if it returned)
Write = tuple[Callable[[], Any], list[str], list[me.Document]]


def _extra(model: type[me.Document], index: int = 0) -> dict[str, Any]:
    if model is FsScoped:
        return {"tenant": "AB"[index % 2]}
    if model is FsBox:
        return {"line": FsLine(label=f"x{index}")}
    return {}


def _save(model: type[me.Document]) -> Write:
    document = model(key="new-0", **_extra(model))
    return document.save, ["new-0"], [document]


def _insert(model: type[me.Document]) -> Write:
    documents = [model(key=f"new-{i}", **_extra(model, i)) for i in range(4)]
    return (lambda: model.objects.insert(documents)), [d.key for d in documents], documents


def _scope(model: type[me.Document]) -> dict[str, Any]:
    return {"tenant": "A"} if model is FsScoped else {}


def _upsert_one(model: type[me.Document]) -> Write:
    query = model.objects(key="up-0", **_scope(model))
    return (lambda: query.upsert_one(set__key="up-0")), ["up-0"], []


def _modify(model: type[me.Document]) -> Write:
    query = model.objects(key="up-0", **_scope(model))
    return (lambda: query.modify(upsert=True, new=True, set__key="up-0")), ["up-0"], []


def _update_one(model: type[me.Document]) -> Write:
    query = model.objects(key="up-0", **_scope(model))
    if model is FsBox:
        return (lambda: query.update_one(upsert=True, set__line__label="made")), ["up-0"], []
    return (lambda: query.update_one(upsert=True, set__key="up-0")), ["up-0"], []


def _adopting(model: type[me.Document]) -> Write:
    """A stored copy lacking the value (the field added later), loaded, changed and saved."""
    model._get_collection().insert_one({"key": "adopt-0", **_scope(model)})
    document = model.objects.get(key="adopt-0")
    document.key = "adopt-0"
    document._changed_fields = ["key"]  # changed to the same value: saved all the same
    return document.save, ["adopt-0"], [document]


def _backfill(model: type[me.Document]) -> Write:
    model._get_collection().insert_many(
        [{"key": "legacy-0", "tenant": "A"}, {"key": "legacy-1", "tenant": "B"}]
    )
    return (lambda: backfill(model, batch_size=1)), ["legacy-0", "legacy-1"], []


WRITES: dict[str, Callable[[type[me.Document]], Write]] = {
    "save": _save,
    "insert": _insert,
    "upsert_one": _upsert_one,
    "modify": _modify,
    "update_one": _update_one,
    "adopting": _adopting,
    "backfill": _backfill,
}
PLAN = [
    *((FsScoped, write) for write in WRITES),
    *((FsTwo, write) for write in ("save", "insert", "upsert_one", "modify", "update_one")),
    *((FsBox, write) for write in ("save", "insert", "update_one")),
    *((FsBatch, write) for write in ("save", "insert", "upsert_one", "modify")),
]


# -- the checks ---------------------------------------------------------------------------------


def _value(model: type[me.Document], stored: dict[str, Any]) -> tuple[Any, ...]:
    """The generated value(s) of a stored document, with what makes them unique (the scope)."""
    if model is FsScoped:
        return (stored.get("tenant"), stored.get("n"))
    if model is FsBox:
        return ((stored.get("line") or {}).get("no"),)
    return (stored.get("_id"),)


def _counter(model: type[me.Document], stored: dict[str, Any]) -> tuple[str, Any]:
    """The counter a stored document's number comes from, and the number."""
    if model is FsScoped:
        return f"fs_scoped.n@{stored.get('tenant')}", stored.get("n")
    if model is FsBox:
        return "fs_line.no", (stored.get("line") or {}).get("no")
    return {FsTwo: "fs_two.id", FsBatch: "fs_batch.id"}[model], stored.get("_id")


def _python_differs(model: type[me.Document], document: Any, stored: dict[str, Any]) -> list[str]:
    label = document.key
    if model is FsScoped and document.n != stored.get("n"):
        return [f"{label}: n {document.n} in Python, {stored.get('n')} stored"]
    if model in (FsTwo, FsBatch) and document.pk != stored.get("_id"):
        return [f"{label}: key {document.pk} in Python, {stored.get('_id')} stored"]
    if model is FsTwo and document.code != stored.get("code"):
        return [f"{label}: code {document.code} in Python, {stored.get('code')} stored"]
    if model is FsBox and document.line.no != (stored.get("line") or {}).get("no"):
        return [f"{label}: line.no {document.line.no} in Python, {stored.get('line')} stored"]
    return []


#: How the application's retry may end: written, refused as a duplicate, or still failing over.
_RETRY_ENDINGS = (
    type(None),
    me.errors.NotUniqueError,
    pymongo.errors.ConnectionFailure,
    KeyboardInterrupt,
)


def _violations(
    model: type[me.Document],
    write: Write,
    outcome: Outcome,
    stored: list[dict[str, Any]],
    counters: dict[str, Any],
) -> list[str]:
    _, keys, documents = write
    problems: list[str] = []
    existing = EXISTING[model]
    by_key = Counter(document.get("key") for document in stored)
    for before in existing:
        now = [document for document in stored if document.get("key") == before["key"]]
        if len(now) != 1 or any(now[0].get(k) != v for k, v in before.items() if k != "_id"):
            problems.append(f"pre-existing {before['key']} is now {now}")
    known = {*keys, *(before["key"] for before in existing)}
    problems += [f"{key} stored {count} times" for key, count in by_key.items() if count > 1]
    problems += [f"unknown key {key}" for key in by_key if key not in known]
    if outcome.returned:
        problems += [f"{key} not stored" for key in keys if by_key[key] == 0]
    if model is FsTwo:
        for name in ("_id", "code"):
            held = Counter(document.get(name) for document in stored)
            problems += [f"{name}={v} held {n} times" for v, n in held.items() if n > 1]
    else:
        held = Counter(_value(model, document) for document in stored)
        problems += [f"{v} held {n} times" for v, n in held.items() if n > 1]
    for document in stored:
        if document.get("key") not in keys:
            continue
        if None in _value(model, document) or (model is FsTwo and document.get("code") is None):
            problems.append(f"{document.get('key')} stored without its value: {document}")
        name, number = _counter(model, document)
        if number is not None and (counters.get(name) is None or number > counters[name]):
            problems.append(f"{document.get('key')} holds {number}, past {name}: {counters}")
    if outcome.returned:
        found = {document.get("key"): document for document in stored}
        for document in documents:
            problems += _python_differs(model, document, found.get(document.key, {}))
    ending = outcome.ending
    if ending is not None and not isinstance(ending, ACCEPTABLE):
        problems.append(f"unexpected {type(ending).__name__}: {ending}")
    if outcome.failed_over and not (isinstance(ending, _RETRY_ENDINGS) or concern_failed(ending)):
        problems.append(f"the retry was refused: {type(ending).__name__}: {ending}")
    return problems


# -- one run ------------------------------------------------------------------------------------


def _run(model: type[me.Document], write_name: str, faults: Faults) -> tuple[list[str], str]:
    """One run on a fresh database: the calls made, and the problems found (with the outcome)."""
    draws.seed(52)
    with connected_threadsafe(TEST_URI, hook=faults, **CLIENT_OPTIONS) as connect:
        db = connect()
        collection = db[model._get_collection_name()]
        collection.insert_many([dict(document) for document in EXISTING[model]])
        model.ensure_indexes()
        write = WRITES[write_name](model)
        faults.armed = True
        try:
            outcome = retrying(lambda: [write[0]()])
        finally:
            faults.armed = False
            faults.land()
        stored = list(collection.find())
        counters = {c["_id"]: c.get("next") for c in db["mongoengine.counters"].find()}
        problems = _violations(model, write, outcome, stored, counters)
    model._collection = None
    return faults.calls, "" if not problems else f"{outcome}: " + "; ".join(problems)


_tally: dict[tuple[str, str], int] = {}


@pytest.mark.parametrize(
    ("model", "write_name"), PLAN, ids=[f"{m.__name__[2:]}-{w}" for m, w in PLAN]
)
def test_a_fault_at_every_call_of_each_shape_loses_and_doubles_nothing(
    model: type[me.Document], write_name: str
) -> None:
    calls, problem = _run(model, write_name, Faults())
    assert not problem, f"without a fault: {problem}"
    failures, runs = [], 0
    for k in range(len(calls)):
        for mode in modes_for(calls[k]):
            _, problem = _run(model, write_name, Faults(k, mode))
            runs += 1
            if problem:
                failures.append(f"k={k} ({calls[k]}) {mode}: {problem}")
        late_calls, _ = _run(model, write_name, Faults(k, "late"))
        for second in range(k + 2, len(late_calls)):
            _, problem = _run(model, write_name, Faults(k, "late", **{f"k{second}": "before"}))
            runs += 1
            if problem:
                failures.append(f"late at {k}, then at {second} ({late_calls[second]}): {problem}")
    _tally[(model.__name__, write_name)] = runs
    assert not failures, f"{len(failures)} failing run(s):\n" + "\n".join(failures)


def test_the_tally_of_the_shapes(request: pytest.FixtureRequest) -> None:
    """Prints the count of runs (``pytest -s``); every case ran all its runs."""
    selected = [item for item in request.session.items if "every_call_of_each_shape" in item.name]
    if len(selected) != len(PLAN):
        pytest.skip("runs with the whole module")
    print(f"\nfault runs on the shapes: {sum(_tally.values())} over {len(_tally)} cases")
    assert len(_tally) == len(PLAN), "a case stopped before all its runs were made"


def test_the_checks_catch_what_they_look_for() -> None:
    """A control: a document stored twice, a number held twice in its scope and one past its
    counter, a pre-existing document changed, and a retry refused for another reason."""
    stored = [
        {"key": "pre-1", "tenant": "A", "n": 1},
        {"key": "pre-2", "tenant": "A", "n": 2},
        {"key": "pre-3", "tenant": "A", "n": 3},
        {"key": "pre-b", "tenant": "B", "n": 9},
        {"key": "new-0", "tenant": "A", "n": 3},
        {"key": "new-0", "tenant": "A", "n": 5},
    ]
    refused = Outcome(failed_over=True, ending=me.errors.ValidationError("refused"))
    write: Write = (lambda: None, ["new-0"], [])
    problems = _violations(FsScoped, write, refused, stored, {"fs_scoped.n@A": 4})
    assert problems == [
        "pre-existing pre-b is now [{'key': 'pre-b', 'tenant': 'B', 'n': 9}]",
        "new-0 stored 2 times",
        "('A', 3) held 2 times",
        "new-0 holds 5, past fs_scoped.n@A: {'fs_scoped.n@A': 4}",
        "the retry was refused: ValidationError: refused",
    ]
