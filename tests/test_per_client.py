"""What the package knows through one connection is never found through another.

Its per-process caches (unique indexes seen, counter values leased, update attempts whose
outcome is unknown) are kept per client, keyed by ``id(client)``: CPython gives a freed client's
``id`` to the next object of its size, often the next client. An application that reconnects
(a new ``connect()`` after ``disconnect()``, as after a fork or a change of settings) must meet
none of the old connection's entries.
"""

from __future__ import annotations

import gc
import uuid
from typing import Any

import mongoengine as me
import pytest
from _support import TEST_URI

from mongoengine_ids import RandomUniqueField
from mongoengine_ids.errors import UniqueIndexMissingError
from mongoengine_ids.resets import PerClient
from mongoengine_ids.testing import _without_database

ALIAS = "per_client"


class Client:
    """Stands for a client: a plain object, freed as soon as it is dropped."""


def test_entries_go_with_their_client() -> None:
    cache: PerClient[str, int] = PerClient()
    ids: list[int] = []
    for _ in range(100):
        client = Client()
        assert cache.get(client, "indexes") is None  # never the entry of a freed client
        cache.set(client, "indexes", id(client))
        assert cache.get(client, "indexes") == id(client)
        ids.append(id(client))
        del client  # freed here (no cycle): its id is free for the next one
    assert len(set(ids)) < len(ids)  # ids were reused: the first assertion met that case


def test_entries_are_per_client_and_key() -> None:
    cache: PerClient[str, int] = PerClient()
    one, other = Client(), Client()
    cache.set(one, "a", 1)
    cache.set(one, "b", 2)
    cache.set(other, "a", 3)
    assert (cache.get(one, "a"), cache.get(one, "b"), cache.get(other, "a")) == (1, 2, 3)
    cache.drop(one, lambda key: key != "a")
    assert (cache.get(one, "a"), cache.get(one, "b"), cache.get(other, "a")) == (None, 2, 3)
    assert cache.pop(other, "a") == 3
    assert cache.pop(other, "a") is None
    cache.clear()
    assert cache.get(one, "b") is None


def _connect() -> Any:
    name = f"mongoengine_ids_test_{uuid.uuid4().hex[:12]}"
    if TEST_URI is None:
        import mongomock

        me.connect(
            name,
            alias=ALIAS,
            mongo_client_class=mongomock.MongoClient,
            uuidRepresentation="standard",
        )
    else:
        # MongoEngine takes a database the URI names over `name` (and _disconnect drops it):
        # it is left out. Not testing.connected(): its close resets the caches under test.
        host = _without_database(TEST_URI)
        me.connect(name, alias=ALIAS, host=host, uuidRepresentation="standard")
    return me.get_db(ALIAS)


def _disconnect(model: type[me.Document]) -> None:
    if TEST_URI is not None:
        db = me.get_db(ALIAS)
        db.client.drop_database(db.name)
    me.disconnect(ALIAS)
    model._collection = None
    gc.collect()


def test_a_new_connection_checks_the_unique_index_again() -> None:
    """The first connection's database has the unique index; no later one has: every save
    through a later one is refused, even when its client has the id of the first (before the
    caches were kept per client, 5 of 40 reconnections here met the first's entry)."""

    class Voucher(me.Document):
        code = RandomUniqueField(digits=8)
        meta = {"db_alias": ALIAS, "collection": "vouchers", "auto_create_index": False}

    first = _connect()
    first.vouchers.create_index("code", unique=True)
    Voucher().save()  # the index is seen, and remembered for this connection
    del first
    _disconnect(Voucher)
    for _ in range(40):
        db = _connect()
        with pytest.raises(UniqueIndexMissingError):
            Voucher().save()
        assert list(db.vouchers.find()) == []
        del db
        _disconnect(Voucher)
