"""The queryset of a model with generated fields: MongoEngine's, with writes and loads routed
through the write path."""

from __future__ import annotations

from typing import Any

from . import bulk, seam
from . import upsert as upserts


class GeneratingQuerySetMixin:
    """Bulk insert and upserts that generate values; loads that remember their projection."""

    def insert(
        self,
        doc_or_docs: Any,
        load_bulk: bool = True,
        write_concern: dict[str, Any] | None = None,
        signal_kwargs: dict[str, Any] | None = None,
    ) -> Any:
        """Insert documents, generating the values of the whole batch at once (see
        :mod:`mongoengine_ids.write.bulk`)."""
        return bulk.insert(self, doc_or_docs, load_bulk, write_concern, signal_kwargs)

    def update(self, upsert: bool = False, **kwargs: Any) -> Any:
        """MongoEngine's ``update()``; an upsert sets the generated values on insert."""
        parent = super().update  # type: ignore[misc]
        options = {key: kwargs.pop(key) for key in _UPDATE_OPTIONS if key in kwargs}
        if not upsert:
            return parent(upsert=False, **options, **kwargs)
        return upserts.upsert(self, kwargs, lambda u: parent(upsert=True, **options, **u))

    def modify(self, upsert: bool = False, **kwargs: Any) -> Any:
        """MongoEngine's ``modify()``; an upsert sets the generated values on insert."""
        parent = super().modify  # type: ignore[misc]
        options = {key: kwargs.pop(key) for key in _MODIFY_OPTIONS if key in kwargs}
        if not upsert or options.get("remove"):
            return parent(upsert=upsert, **options, **kwargs)
        return upserts.upsert(self, kwargs, lambda u: parent(upsert=True, **options, **u))

    def in_bulk(self, object_ids: Any) -> dict[Any, Any]:
        """MongoEngine's ``in_bulk()``, with the ids in stored form: keys are the ids' values."""
        pk = seam.pk_field(seam.parts(self).document_class)
        found = super().in_bulk([pk.to_mongo(pk.to_python(i)) for i in object_ids])  # type: ignore[misc]
        return {pk.to_python(key): document for key, document in found.items()}

    def __next__(self) -> Any:
        document = super().__next__()  # type: ignore[misc]
        seam.note_loaded(document, seam.parts(self).loaded)
        return document

    def __getitem__(self, key: Any) -> Any:
        found = super().__getitem__(key)  # type: ignore[misc]
        seam.note_loaded(found, seam.parts(self).loaded)
        return found


_UPDATE_OPTIONS = ("multi", "write_concern", "read_concern", "full_result", "array_filters")
_MODIFY_OPTIONS = ("full_response", "remove", "new", "array_filters")
