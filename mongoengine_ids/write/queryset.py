"""The queryset of a model with generated fields: MongoEngine's, with writes and loads routed
through the write path."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pymongo.errors
from mongoengine.errors import NotUniqueError, OperationError
from mongoengine.queryset.base import BaseQuerySet

from . import bulk, references, seam, values
from . import upsert as upserts


class GeneratingQuerySetMixin(BaseQuerySet):  # type: ignore[misc]
    """Bulk insert and upserts that generate values; loads that remember their projection.

    Placed right above MongoEngine's ``BaseQuerySet`` in the class order
    (:func:`~mongoengine_ids.write.seam.generating_queryset`): a custom queryset's own methods
    run first, and their ``super()`` calls reach these.
    """

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

    def update(self, upsert: bool = False, *args: Any, **kwargs: Any) -> Any:
        """MongoEngine's ``update()``; an upsert sets the generated values on insert, and new
        embedded documents in the update get theirs."""
        options = _options("update", seam.UPDATE_OPTIONS, args, kwargs)

        def run(update: dict[str, Any], sending: upserts.Sending) -> Any:
            chosen = {**options, "multi": False} if sending.one else dict(options)
            if sending.acknowledge:
                collection = seam.parts(self).collection
                concern = values.acknowledged_option(collection, chosen.get("write_concern"))
                chosen["write_concern"] = concern
            parent: Any = super(GeneratingQuerySetMixin, self._narrowed(sending))
            return parent.update(upsert=upsert, **chosen, **sending.sent(update))

        with _as_update_error():
            return self._generating(
                kwargs,
                upsert,
                options.get("multi", True) is False,
                seam.acknowledged(seam.parts(self).collection, options.get("write_concern")),
                run,
            )

    def modify(self, upsert: bool = False, *args: Any, **kwargs: Any) -> Any:
        """MongoEngine's ``modify()``; an upsert sets the generated values on insert, and new
        embedded documents in the update get theirs."""
        options = _options("modify", seam.MODIFY_OPTIONS, args, kwargs)

        def run(update: dict[str, Any], sending: upserts.Sending) -> Any:
            narrowed = self._narrowed(sending)
            if sending.acknowledge:
                narrowed = seam.acknowledging_queryset(narrowed)
            parent: Any = super(GeneratingQuerySetMixin, narrowed)
            try:
                return parent.modify(upsert=upsert, **options, **sending.sent(update))
            except Exception as error:
                # Not the driver's: MongoEngine's modify() failed after its database call
                # (its query and update were built before, by the package; an update the
                # driver cannot encode fails in the driver), building the document it returns
                # (a field not declared, a post_init handler): the write is done, its values
                # stored (probe AR: they had been given back).
                sending.written = not values.from_driver(error)
                raise

        if options.get("remove"):  # the document is deleted: MongoEngine applies no update
            result = run(kwargs, upserts.Sending())
        else:
            acknowledged = seam.acknowledged(seam.parts(self).collection, None)
            with _as_update_error():
                result = self._generating(kwargs, upsert, True, acknowledged, run, ordered=True)
        seam.note_read(result, seam.parts(self))  # the returned one
        return result

    def upsert_one(self, *args: Any, **kwargs: Any) -> Any:
        """MongoEngine's ``upsert_one()``: its update, then a read of the document, one write:
        if the read fails with its outcome unknown, the application's retry is that update's
        retry (see :func:`~.upsert.one_write`)."""
        with upserts.one_write():
            return super().upsert_one(*args, **kwargs)

    def _narrowed(self, sending: upserts.Sending) -> Any:
        """This queryset, or a copy whose filter also requires ``sending.absent``."""
        return self if sending.absent is None else self.filter(__raw__=sending.absent)

    def _generating(
        self,
        update: dict[str, Any],
        upserting: bool,
        single: bool,
        acknowledged: bool,
        run: Callable[[dict[str, Any], upserts.Sending], Any],
        *,
        ordered: bool = False,
    ) -> Any:
        """``run(update, sending)``, the values of new embedded documents in it made
        (``single``: it writes one document at most), and an upsert's added (set on insert
        only); ``acknowledged``: its result says what it wrote (not ``w=0``); ``sending``: how
        to send it (see :class:`~.upsert.Sending`)."""

        def send(owner: str, earlier: bool, sending: upserts.Sending) -> Any:
            if upserting:  # its own values set on insert
                return upserts.upsert(
                    self,
                    update,
                    lambda u: run(u, sending),
                    owner,
                    earlier,
                    sending,
                )
            return run(update, sending)

        return upserts.with_given_values(
            self,
            update,
            send,
            single=single,
            upserting=upserting,
            acknowledged=acknowledged,
            ordered=ordered,
        )

    def in_bulk(self, object_ids: Any) -> dict[Any, Any]:
        """MongoEngine's ``in_bulk()``, the ids given in any form the key field accepts (its
        value, the text, the stored form); the result is keyed by the ids as given."""
        query = seam.parts(self)
        found = references.in_bulk(query.document_class, object_ids, super().in_bulk)
        for document in found.values():
            seam.note_read(document, query)
        return found

    def from_json(self, json_data: Any) -> list[Any]:
        """MongoEngine's ``from_json()``: a key the JSON holds as text or a number is a value of
        the field (:func:`.seam.note_json_key`), as for ``Document.from_json()``."""
        documents: list[Any] = super().from_json(json_data)
        for document in documents:
            seam.note_json_key(document)
        return documents

    def distinct(self, field: str) -> Any:
        """MongoEngine's ``distinct()``; the values of a generated field are the field's values
        (a LocalityUUID, not the stored Binary)."""
        found = super().distinct(field)
        return references.distinct_values(seam.parts(self).document_class, field, found)

    def __reduce__(self) -> Any:
        # Pickled as MongoEngine's class it extends (this one is made at run time: see
        # seam.generating_queryset), made generating again when loaded.
        base = seam.made_from(type(self))
        if base is None:  # a class of yours extending a generating one: importable
            return super().__reduce__()
        return (_unpickle, (base, self.__getstate__()))

    def _clone_into(self, new_qs: Any) -> Any:
        # no_cache() and cache() clone into MongoEngine's own classes: they keep these methods.
        return super()._clone_into(seam.generating_instance(new_qs))

    def __next__(self) -> Any:
        document = super().__next__()
        seam.note_read(document, seam.parts(self))
        return document

    def __getitem__(self, key: Any) -> Any:
        found = super().__getitem__(key)
        seam.note_read(found, seam.parts(self))
        return found


@contextlib.contextmanager
def _as_update_error() -> Iterator[None]:
    """What MongoEngine's ``update()`` and ``modify()`` raise for a failed database call,
    raised for the package's own calls around theirs too (a counter's lease, a look-up): they
    reached the application as pymongo's errors, where ``save()`` raised MongoEngine's
    (probe CB). MongoEngine's own call raises its errors already."""
    try:
        yield
    except pymongo.errors.DuplicateKeyError as error:
        raise NotUniqueError(f"Update failed ({error})") from error
    except pymongo.errors.OperationFailure as error:
        raise OperationError(f"Update failed ({error})") from error


def _unpickle(base: type, state: dict[str, Any]) -> Any:
    """A pickled generating queryset (see ``GeneratingQuerySetMixin.__reduce__``)."""
    klass: Any = seam.generating_queryset(base)
    queryset = object.__new__(klass)
    queryset.__setstate__(state)
    return queryset


def _options(
    method: str, names: tuple[str, ...], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any]:
    """The options of an ``update()``/``modify()`` call given positionally (``args``, after
    ``upsert``, in MongoEngine's order) or by name (taken out of ``kwargs``, which is left with
    the update itself), as MongoEngine's own signature takes them."""
    if len(args) > len(names):
        raise TypeError(
            f"{method}() takes at most {len(names) + 1} positional arguments (upsert, "
            f"{', '.join(names)}); {len(args) + 1} were given"
        )
    options = dict(zip(names[: len(args)], args, strict=True))
    for name in names:
        if name in kwargs:
            if name in options:
                raise TypeError(f"{method}() got multiple values for argument {name!r}")
            options[name] = kwargs.pop(name)
    return options
