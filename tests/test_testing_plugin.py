"""The user-facing pytest plugin, run the way a user's own suite runs it."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import mongoengine
import mongoengine.connection
import mongomock
import pymongo.errors
import pytest
from bson import DBRef
from mongomock.store import ServerStore
from pymongo import ReadPreference

from mongoengine_ids import SequenceField
from mongoengine_ids.testing import connected, connected_threadsafe

USER_TESTS = """
import mongoengine as me
from bson.binary import Binary
from mongoengine_ids import LocalityUUIDField, RandomUniqueField


class Place(me.Document):
    id = LocalityUUIDField(primary_key=True)
    name = me.StringField()


class Archived(me.Document):
    meta = {"db_alias": "archive"}
    id = LocalityUUIDField(primary_key=True)


class Card(me.Document):
    number = RandomUniqueField(digits=3)


def test_counting_attempts(mongoengine_db):
    for _ in range(9):
        Card().save()
    stats = Card.number.stats()
    # Each save kept one value; a value drawn again (900 of them) counts one collision more.
    assert stats.attempts - stats.collisions == 9
    assert stats.exhausted == 0
    assert len(set(card.number for card in Card.objects)) == 9


def test_the_stats_start_from_zero(mongoengine_db):
    Card().save()
    assert Card.number.stats().attempts == 1
    assert Card.number.stats().collisions == 0


def test_first(mongoengine_db):
    place = Place(name="a").save()
    assert list(mongoengine_db["place"].find()) == [{"_id": Binary(place.id.bytes, 4), "name": "a"}]


def test_second_starts_clean(mongoengine_db):
    assert Place.objects.count() == 0
    assert mongoengine_db.list_collection_names() == []


def test_more_aliases(mongoengine_connect):
    archive = mongoengine_connect("archive")
    default = mongoengine_connect()
    Archived().save()
    Place(name="b").save()
    assert archive["archived"].count_documents({}) == 1
    assert default["place"].count_documents({}) == 1


def test_disconnected_after_each_test():
    import mongoengine.connection as connection
    assert connection._connections == {}


def test_a_local_model_reusing_the_name(mongoengine_db):
    globals()["Place"](name="module").save()  # caches this test's collection on the class

    class Place(me.Document):  # MongoEngine's registry now maps "Place" to this class
        title = me.StringField()

    Place(title="local").save()


def test_the_module_model_writes_to_this_tests_database(mongoengine_db):
    place = Place(name="c").save()
    assert list(mongoengine_db["place"].find()) == [{"_id": Binary(place.id.bytes, 4), "name": "c"}]
"""


def test_plugin_fixtures_give_each_test_a_clean_mongomock(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    # A subprocess, so that the plugin is found through its pytest11 entry point, as for users.
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=8)


def test_connected_works_without_pytest(pytester: pytest.Pytester) -> None:
    script = pytester.makepyfile(
        no_pytest="""
        import sys
        sys.modules["pytest"] = None  # as if pytest were not installed
        import mongoengine as me
        from mongoengine_ids import LocalityUUIDField
        from mongoengine_ids.testing import connected

        class Place(me.Document):
            id = LocalityUUIDField(primary_key=True)

        with connected() as connect:
            connect()
            Place().save()
            print("saved", Place.objects.count())
        """
    )
    result = pytester.run(sys.executable, str(script))
    assert result.ret == 0, result.stderr.str()
    assert result.stdout.lines == ["saved 1"]


@pytest.mark.parametrize("threadsafe", [False, True], ids=["connected", "threadsafe"])
def test_without_mongomock_the_error_says_how_to_install_it(
    pytester: pytest.Pytester, threadsafe: bool
) -> None:
    script = pytester.makepyfile(
        no_mongomock=f"""
        import sys
        sys.modules["mongomock"] = None  # as if mongomock were not installed
        from mongoengine_ids.testing import connected, connected_threadsafe

        with ({"connected_threadsafe" if threadsafe else "connected"})() as connect:
            try:
                connect()
            except ModuleNotFoundError as error:
                print(error.name, "|", error)
        """
    )
    result = pytester.run(sys.executable, str(script))
    assert result.ret == 0, result.stderr.str()
    assert result.stdout.lines == [
        "mongomock | mongoengine-ids' test support runs on mongomock, which is not installed: "
        "pip install mongomock, or give a server URI"
    ]


def test_connect_forgets_the_collections_models_cached_from_a_client_closed_before() -> None:
    # Probe BM-1: MongoEngine's disconnect() resets the collection of the model its registry
    # holds by that name only; the other kept the closed client's, and connect() wrote there.
    class BmItem(mongoengine.Document):
        id = SequenceField(primary_key=True, batch_size=10)
        name = mongoengine.StringField()
        meta = {"db_alias": "bm1"}

    # Another app's model of that name, which MongoEngine's registry now holds.
    type("BmItem", (mongoengine.Document,), {"meta": {"db_alias": "bm1", "collection": "bm2"}})
    mongoengine.connect(
        "bm_before",
        alias="bm1",
        mongo_client_class=mongomock.MongoClient,
        uuidRepresentation="standard",
    )
    BmItem(name="before").save()
    before = mongoengine.get_db("bm1")
    mongoengine.disconnect("bm1")  # by the user, before the test
    with connected() as connect:
        first = connect("bm1")
        assert BmItem(name="a").save().id == 1
        mongoengine.disconnect("bm1")  # by the test: a restart
        second = connect("bm1")
        assert BmItem(name="b").save().id == 1
        assert list(first.bm_item.find()) == [{"_id": 1, "name": "a"}]
        assert list(second.bm_item.find()) == [{"_id": 1, "name": "b"}]
    assert list(before.bm_item.find()) == [{"_id": 1, "name": "before"}]


@pytest.mark.parametrize("representation", ["standard", "pythonLegacy", "unspecified"])
def test_connect_passes_the_uuid_representation(representation: str) -> None:
    with connected() as connect:
        connect("other", uuid_representation=representation)
        settings = mongoengine.connection._connection_settings["other"]
        assert settings["uuidRepresentation"] == representation


@pytest.mark.parametrize(
    ("representation", "error"),
    [
        ("bogus", ValueError),
        ("Standard", ValueError),
        ("python_legacy", ValueError),
        (4, TypeError),
    ],
)
def test_connect_refuses_a_uuid_representation_pymongo_does_not_know(
    representation: Any, error: type[Exception]
) -> None:
    # mongomock takes any and ignores it: a typo would pass here and fail on a server.
    for opened in (connected, connected_threadsafe):
        with opened() as connect:
            with pytest.raises(error, match=rf"uuid_representation.*{representation!r}"):
                connect("other", uuid_representation=representation)
            assert "other" not in mongoengine.connection._connection_settings


def test_connect_without_a_uuid_representation_leaves_mongoengines_default() -> None:
    with connected() as connect:
        with pytest.warns(DeprecationWarning, match="No uuidRepresentation is specified"):
            connect(uuid_representation=None)
        # MongoEngine 0.27 to 0.29 fall back to pythonLegacy.
        settings = mongoengine.connection._connection_settings["default"]
        assert settings["uuidRepresentation"] == "pythonLegacy"


def test_the_threadsafe_hook_sees_what_each_call_sends() -> None:
    seen: list[tuple[str, str, tuple[Any, ...], dict[str, Any]]] = []

    def hook(collection: str, method: str, call: Any) -> Any:
        seen.append((collection, method, call.args, call.keywords))
        return call()

    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        db.things.insert_one({"_id": 1})
        assert db.things.find_one({"_id": 1}, projection={"_id": 1}) == {"_id": 1}
        assert db.dereference(DBRef("things", 1)) == {"_id": 1}
    assert seen[:3] == [
        ("things", "insert_one", ({"_id": 1},), {}),
        ("things", "find_one", ({"_id": 1},), {"projection": {"_id": 1}}),
        # a round trip on a server (a find), so the hook sees it too
        ("", "dereference", (DBRef("things", 1),), {}),
    ]


def test_the_threadsafe_client_keeps_each_objects_own_options_and_names() -> None:
    """The identity attributes a proxy reads once (name, database, client, write_concern...)
    are each object's own: a with_options() copy has its own, and reads no database call."""
    from pymongo import WriteConcern

    calls: list[str] = []

    def hook(collection: str, method: str, call: Any) -> Any:
        calls.append(method)
        return call()

    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        things = db.things
        quiet = things.with_options(write_concern=WriteConcern(w=0))
        assert (things.name, things.full_name) == ("things", f"{db.name}.things")
        assert things.database is db
        assert things.database.client is db.client
        assert things.write_concern.document == {}
        assert quiet.write_concern.document == {"w": 0}
        assert things.write_concern.document == {}  # not the copy's
        assert db.other.name == "other"
        assert calls == []
        quiet.insert_one({"_id": 1})
        assert calls == ["insert_one"]


def test_the_threadsafe_hook_sees_a_cursor_read_by_index() -> None:
    """``cursor[0]`` (MongoEngine's ``first()``, ``with_id()``) runs a query: the hook sees it,
    and can fail it; a slice makes a cursor, which is read later."""
    import pymongo.errors

    calls: list[str] = []
    fail = False

    def hook(collection: str, method: str, call: Any) -> Any:
        calls.append(f"{collection}.{method}")
        if fail:
            raise pymongo.errors.AutoReconnect("injected")
        return call()

    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        db.things.insert_many([{"_id": 1}, {"_id": 2}])
        calls.clear()
        cursor = db.things.find({}).sort("_id", -1)
        assert cursor[0] == {"_id": 2}
        assert calls == ["things.find"]
        assert list(db.things.find({})[1:]) == [{"_id": 2}]
        assert calls == ["things.find", "things.getMore", "things.getMore"]
        fail = True
        with pytest.raises(pymongo.errors.AutoReconnect):
            db.things.find({})[0]


def test_the_hooks_call_is_a_partial_for_every_read() -> None:
    """Found by a probe: ``cursor[0]`` gave the hook a lambda, which has no ``args``."""
    seen: list[tuple[str, Any]] = []

    def hook(collection: str, method: str, call: Any) -> Any:
        seen.append((method, call.args))
        return call()

    with connected_threadsafe(hook=hook) as connect:
        db = connect()
        db.things.insert_one({"_id": 1})
        seen.clear()
        assert db.things.find({})[0] == {"_id": 1}
    (method, args), *_ = seen
    assert method == "find"
    assert args[1] == 0  # the cursor, then the index read


@pytest.mark.parametrize("threadsafe", [False, True], ids=["connected", "threadsafe"])
def test_client_options_and_a_uuid_representation_together(threadsafe: bool) -> None:
    """Found by a probe: connected_threadsafe(uuidRepresentation=...) raised TypeError (the
    option given twice). Probe BZ-2: connect()'s default "standard" replaced it silently. It
    is connect()'s default; connect(uuid_representation=...) wins."""
    make = connected_threadsafe if threadsafe else connected
    with make(uuidRepresentation="pythonLegacy") as connect:
        connect("one")
        connect("other", uuid_representation="standard")
        settings = mongoengine.connection._connection_settings
        assert settings["one"]["uuidRepresentation"] == "pythonLegacy"
        assert settings["other"]["uuidRepresentation"] == "standard"
    with pytest.raises(ValueError, match="'legacy' is not one of pymongo's"):
        make(uuidRepresentation="legacy").__enter__()
    # Review CA-7: pymongo reads the names of its options in any case.
    with make(uuidrepresentation="pythonLegacy") as connect:
        connect()
        settings = mongoengine.connection._connection_settings["default"]
        assert settings["uuidRepresentation"] == "pythonLegacy"
        assert "uuidrepresentation" not in settings


@pytest.mark.parametrize("threadsafe", [False, True], ids=["connected", "threadsafe"])
@pytest.mark.parametrize("option", ["name", "db", "host", "alias", "uuid_representation"])
def test_options_that_choose_the_database_are_refused(threadsafe: bool, option: str) -> None:
    """Probe BZ-2: name="app" used database "app" (never dropped), not a new one per alias."""
    make = connected_threadsafe if threadsafe else connected
    with pytest.raises(TypeError, match=rf"test connections' own: {option}= \("):
        make(**{option: "app"}).__enter__()
    assert mongoengine.connection._connection_settings == {}


@pytest.mark.parametrize("threadsafe", [False, True], ids=["connected", "threadsafe"])
@pytest.mark.parametrize("uri", [27017, b"mongodb://localhost"])
def test_a_uri_that_is_not_text_is_refused_at_once(threadsafe: bool, uri: Any) -> None:
    """Probe 40 (C): it failed at the first connect(), with an AttributeError or a TypeError
    of bytes against str from inside the package."""
    make = connected_threadsafe if threadsafe else connected
    with pytest.raises(TypeError, match=rf"uri must be a MongoDB URI \(a str\).*{uri!r}"):
        make(uri).__enter__()
    assert mongoengine.connection._connection_settings == {}


def test_a_client_class_of_your_own_is_used_on_mongomock() -> None:
    """Probe BZ-2: mongo_client_class= was replaced by mongomock's silently; connected() uses
    yours (a mongomock subclass, say). connected_threadsafe() makes its own: refused."""
    import mongomock

    made: list[Any] = []

    class Counted(mongomock.MongoClient):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            made.append(self)
            super().__init__(*args, **kwargs)

    with connected(mongo_client_class=Counted) as connect:
        db = connect()
        db.things.insert_one({"_id": 1})
        assert isinstance(db.client, Counted)
    assert len(made) == 1
    with pytest.raises(TypeError, match="mongo_client_class= "):
        connected_threadsafe(mongo_client_class=Counted).__enter__()


@pytest.mark.parametrize("threadsafe", [False, True], ids=["connected", "threadsafe"])
def test_a_uri_naming_a_database_still_gives_each_alias_a_new_one(threadsafe: bool) -> None:
    """Found by a probe: MongoEngine takes the URI's database over the name given, so every
    alias of every test used "app" on the server, never dropped. (No server is reached: the
    client connects lazily.)"""
    make = connected_threadsafe if threadsafe else connected
    uri = "mongodb://user:pw@127.0.0.1:1/app?serverSelectionTimeoutMS=100"
    with contextlib.ExitStack() as stack:
        connect = stack.enter_context(make(uri))
        first, second = connect(), connect("archive")
        names = {first.name, second.name}
        assert len(names) == 2
        assert all(name.startswith("mongoengine_ids_test_") for name in names)
        settings = mongoengine.connection._connection_settings["archive"]
        assert settings["authentication_source"] == "app"  # the credentials' database
        # No server: the databases cannot be dropped on exit, and a warning names them.
        with pytest.warns(RuntimeWarning, match="if the test made them, they are left") as warned:
            stack.close()
    (warning,) = warned
    assert all(repr(name) in str(warning.message) for name in names)
    assert "pw" not in str(warning.message)  # no credentials
    assert mongoengine.connection._connection_settings == {}  # and all disconnected


class _OneServer(mongomock.MongoClient):
    """mongomock clients that share their databases, as the clients of one server do."""

    store = ServerStore()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, _store=self.store, **kwargs)


@pytest.mark.parametrize("threadsafe", [False, True], ids=["connected", "threadsafe"])
def test_the_databases_of_a_uri_are_dropped_also_for_an_alias_the_test_disconnected(
    threadsafe: bool,
) -> None:
    """Review BF: each database was dropped through its alias's client, silently skipped for an
    alias the test had disconnected (``mongoengine.get_connection()`` refused): it stayed on
    the server. The fixture drops them through a client of its own."""
    make = connected_threadsafe if threadsafe else connected
    uri = "mongodb://127.0.0.1:27017/"
    with make(uri, mongo_client_class=_OneServer) as connect:
        made = [connect(), connect("archive"), connect("other")]
        for db in made:
            db.things.insert_one({"name": "a"})
        mongoengine.disconnect("archive")  # as a test of reconnects does
        mongoengine.disconnect("other")  # and connected again, to another server
        mongoengine.connect(
            "elsewhere",
            alias="other",
            mongo_client_class=mongomock.MongoClient,
            uuidRepresentation="standard",
        )
        names = {db.name for db in made}
        assert names <= set(_OneServer().list_database_names())
    assert not names & set(_OneServer().list_database_names())


class _Refusing(_OneServer):
    def drop_database(self, name: Any, *args: Any, **kwargs: Any) -> None:
        raise pymongo.errors.OperationFailure("not authorized to drop", 13)


def test_a_database_that_could_not_be_dropped_is_named_in_a_warning() -> None:
    """Review BF: a failed drop was silent."""
    with contextlib.ExitStack() as stack:
        connect = stack.enter_context(
            connected("mongodb://127.0.0.1:27017/", mongo_client_class=_Refusing)
        )
        names = [connect().name, connect("archive").name]
        for name in names:
            _OneServer()[name].things.insert_one({})
        with pytest.warns(RuntimeWarning, match=r"could not be dropped.*not authorized") as warned:
            stack.close()
    (warning,) = warned
    assert all(repr(name) in str(warning.message) for name in names)
    assert mongoengine.connection._connection_settings == {}
    assert set(names) <= set(_OneServer().list_database_names())  # left, as the warning says
    for name in names:
        _OneServer().drop_database(name)


@pytest.mark.parametrize("threadsafe", [False, True], ids=["connected", "threadsafe"])
def test_client_options_reach_every_client(threadsafe: bool) -> None:
    make = connected_threadsafe if threadsafe else connected
    with make(read_preference=ReadPreference.SECONDARY_PREFERRED, tz_aware=True) as connect:
        for alias in ("default", "other"):
            db = connect(alias)
            assert db.read_preference == ReadPreference.SECONDARY_PREFERRED
            assert db.client.codec_options.tz_aware is True
    with make() as connect:
        db = connect()
        assert db.read_preference == ReadPreference.PRIMARY
        assert db.client.codec_options.tz_aware is False


@pytest.mark.parametrize(
    ("uri", "options", "expected"),
    [
        ("mongodb://h:27017/app", {}, "mongodb://h:27017/"),
        ("mongodb://h/app?w=1", {}, "mongodb://h/?w=1"),
        (
            "mongodb://u:p%2F@h1,h2/app?replicaSet=rs",
            {},
            "mongodb://u:p%2F@h1,h2/?replicaSet=rs&authSource=app",
        ),
        ("mongodb://u:p@h/app.things", {}, "mongodb://u:p@h/?authSource=app"),
        ("mongodb://h/app", {"username": "u"}, "mongodb://h/?authSource=app"),
        ("mongodb://u:p@h/app?authSource=admin", {}, "mongodb://u:p@h/?authSource=admin"),
        (
            "mongodb://u@h/app?authMechanism=MONGODB-X509",
            {},
            "mongodb://u@h/?authMechanism=MONGODB-X509",
        ),
        # the DNS record of an SRV URI may name the authSource: left to it (review)
        ("mongodb+srv://u:p@cluster.example.net/app", {}, "mongodb+srv://u:p@cluster.example.net/"),
        ("mongodb://%2Ftmp%2Fm.sock/app", {}, "mongodb://%2Ftmp%2Fm.sock/"),
        ("mongodb://[::1]:27017", {}, "mongodb://[::1]:27017/"),
    ],
)
def test_the_uris_database_is_left_out_and_still_authenticates(
    uri: str, options: dict[str, Any], expected: str
) -> None:
    from mongoengine_ids.testing import _without_database

    assert _without_database(uri, username="username" in options) == expected
