"""Upserts: ``update(upsert=True)``, ``update_one``, ``upsert_one`` and ``modify(upsert=True)``.

No document instance exists, so no hook of the document runs: the queryset adds the generated
values to the update as ``$setOnInsert`` (written only if the upsert inserts; a matched document
keeps its own). A field fixed by an equality in the filter, or given by the update, is left to
them. A collision of a generated value is retried with a fresh one, as for ``save()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mongoengine.errors import InvalidQueryError

from . import seam, values
from .field import Write
from .values import Slot

_T = TypeVar("_T")

#: Update operators that give a field its value on insert.
_GIVING = ("$set", "$setOnInsert")


def upsert(queryset: Any, update: dict[str, Any], run: Callable[[dict[str, Any]], _T]) -> _T:
    """Run ``run(update)`` with the generated values added as ``set_on_insert__<field>``.

    Raises:
        InvalidQueryError: the update writes a generated field with another operator
            (``inc__``, ``unset__``...): the inserted document would lack its value.
    """
    query = seam.parts(queryset)
    empty = _to_generate(query.document_class, query.query, update)
    if not empty:
        return run(update)
    write = Write(query.document_class, query.collection)
    filled = values.fill(write, empty)

    def attempt() -> _T:
        given = {f"set_on_insert__{slot.name}": slot.value for slot in filled}
        return run({**update, **given})

    return values.send(write, filled, attempt)


def _to_generate(document_class: Any, query: dict[str, Any], update: dict[str, Any]) -> list[Slot]:
    """The generated fields an upsert must give a value: not fixed by the filter nor written
    by the update."""
    operations = seam.update_operations(document_class, **update) if update else {}
    holder = values.Holder()
    empty = []
    for name, field in seam.generated_fields(document_class):
        path = field.db_field
        if _fixed(query.get(path)) or any(path in operations.get(op, {}) for op in _GIVING):
            continue
        for op, fields in operations.items():
            if any(key == path or key.startswith(f"{path}.") for key in fields):
                raise InvalidQueryError(
                    f"{document_class.__name__}.{name} is generated: an upsert cannot write it "
                    f"with {op} (the document it inserts would lack its value); use set__{name} "
                    f"or set_on_insert__{name}, or leave it to be generated"
                )
        empty.append(Slot(holder, holder, name, field, document_class))
    return empty


def _fixed(condition: Any) -> bool:
    """Whether a filter condition gives the field its value when the upsert inserts."""
    if condition is None:
        return False
    if isinstance(condition, dict):
        return bool(condition) and not any(str(key).startswith("$") for key in condition)
    return True
