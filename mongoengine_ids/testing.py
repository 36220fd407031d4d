"""Test support: MongoEngine connected to a fresh database for each test.

Installed as a pytest plugin (entry point ``pytest11``), so with ``mongoengine-ids`` and
``mongomock`` installed these fixtures are available in any test suite, no conftest needed:

``mongoengine_db``
    Connects MongoEngine's ``default`` alias to a new, empty mongomock database and yields it
    (a pymongo-like ``Database``). Everything is disconnected afterwards, and the model classes
    forget their cached collections, so no state leaks into the next test.

``mongoengine_connect``
    A function ``connect(alias="default", *, uuid_representation="standard")`` for tests that
    need more aliases (models with ``meta = {"db_alias": ...}``) or another
    ``uuidRepresentation`` (``None``: none given, MongoEngine's default); each call returns that
    alias's fresh database, and all are disconnected after the test.

Outside pytest, :func:`connected` does the same as a context manager.

``mongoengine_connect_threadsafe``
    Like ``mongoengine_connect``, but every operation of the mongomock client is atomic (one
    lock per client), as on a real server: mongomock alone hands the same counter value to
    several threads. :func:`connected_threadsafe` is the context manager; its ``hook`` sees
    every database call (count round trips, inspect what is sent, inject failures, add latency).
"""

from __future__ import annotations

import contextlib
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Final

import mongoengine
import pymongo.errors
from mongoengine.connection import DEFAULT_CONNECTION_NAME

from ._checks import check_callable
from .instrumented import Hook, instrumented_client_class, require_mongomock
from .resets import reset_process_state
from .write import seam

try:
    from pytest import fixture  # noqa: PT013 - one name, and no pytest needed without it
except ModuleNotFoundError:  # connected() and connected_threadsafe() need no pytest

    def fixture(function: Any) -> Any:  # type: ignore[no-redef]
        return function


Connect = Callable[..., Any]
#: ``connect()``'s ``uuid_representation`` when not given: the ``uuidRepresentation`` the
#: connections were given, else ``"standard"``.
_GIVEN: Final[Any] = object()


class _Connections:
    """The aliases one test connected, and how to tear them down."""

    def __init__(self, uri: str | None, options: dict[str, Any], client_class: bool = True) -> None:
        if uri is not None and not isinstance(uri, str):  # (probe 40, C: it failed at connect())
            raise TypeError(
                f"uri must be a MongoDB URI (a str), or None for mongomock; got {uri!r}"
            )
        _refuse_own_options(options, client_class=client_class)
        self._uri = uri
        # A uuidRepresentation given (pymongo reads its options' names in any case) is
        # connect()'s default (probe BZ-2, review CA-7: "standard" replaced it).
        given = [key for key in options if key.lower() == "uuidrepresentation"]
        self._representation = options.pop(given[-1]) if given else "standard"
        for key in given[:-1]:
            del options[key]
        _representation(self._representation)  # checked now, not at the first connect()
        self._options = options
        self._aliases: list[tuple[str, str]] = []

    def connect(
        self, alias: str = DEFAULT_CONNECTION_NAME, *, uuid_representation: Any = _GIVEN
    ) -> Any:
        if self._uri is None and "mongo_client_class" not in self._options:
            client_class = require_mongomock().MongoClient
            return self._connect(alias, uuid_representation, mongo_client_class=client_class)
        return self._connect(alias, uuid_representation)

    def _connect(self, alias: str, uuid_representation: Any, **more: Any) -> Any:
        """Connect ``alias`` to a new database (on the server of the URI, if any)."""
        name = f"mongoengine_ids_test_{uuid.uuid4().hex[:12]}"
        if uuid_representation is _GIVEN:
            uuid_representation = self._representation
        options = {**self._options, **_representation(uuid_representation), **more}
        if self._uri is not None:
            # MongoEngine takes the URI's database over the name given: it is left out.
            options["host"] = _without_database(self._uri, username="username" in options)
        mongoengine.connect(name, alias=alias, **options)
        self._aliases.append((alias, name))
        # A model may still hold a collection of a client the test (or one before it) closed
        # with MongoEngine's disconnect() (see _forget_cached_collections): its writes went to
        # that database (probe BM-1).
        _forget_cached_collections({alias})
        return mongoengine.get_db(alias)

    def close(self) -> None:
        names = [name for _, name in reversed(self._aliases)]
        left = _drop(self._uri, self._options, names) if self._uri is not None and names else None
        for alias, _ in reversed(self._aliases):
            mongoengine.disconnect(alias)
        _forget_cached_collections({alias for alias, _ in self._aliases})
        self._aliases.clear()
        reset_process_state()
        if left is not None:  # last: with warnings as errors, the rest is done all the same
            warnings.warn(left, RuntimeWarning, stacklevel=4)


def _drop(uri: str, client_options: dict[str, Any], names: list[str]) -> str | None:
    """Drop the databases ``names`` made on the server of ``uri``; what was left, in words.

    Through a client of its own, connected with the options the aliases were: an alias the
    test disconnected has closed its client (pymongo cannot reopen it), one it connected again
    may be on another server, and a hook (``connected_threadsafe``) is not asked. MongoEngine
    reuses the client of an alias still connected with the same options.
    """
    alias = f"mongoengine_ids_drop_{uuid.uuid4().hex[:12]}"
    options: dict[str, Any] = {**client_options, "uuidRepresentation": "standard"}
    options["host"] = _without_database(uri, username="username" in options)
    left: list[str] = []
    error: Exception | None = None
    try:
        mongoengine.connect(names[0], alias=alias, **options)
        client = mongoengine.get_connection(alias)
        for at, name in enumerate(names):
            try:
                client.drop_database(name)
            except pymongo.errors.ConnectionFailure as failed:  # no server: no use waiting again
                left, error = [*left, *names[at:]], failed
                break
            except Exception as failed:
                left.append(name)
                error = failed
    except Exception as failed:  # no client: nothing was dropped
        left, error = names, failed
    finally:
        mongoengine.disconnect(alias)
    if not left:
        return None
    # No server answered: the test may never have made them (probe BZ-4).
    where = (
        "if the test made them, they are left on the server"
        if isinstance(error, pymongo.errors.ConnectionFailure)
        else "they are left on the server"
    )
    return (
        f"mongoengine_ids.testing: the test database(s) {', '.join(map(repr, left))} could not "
        f"be dropped ({type(error).__name__}: {error}); {where}: drop them by hand"
    )


#: pymongo's names of the ``uuidRepresentation`` option (mongomock takes any and ignores it).
UUID_REPRESENTATIONS = ("standard", "unspecified", "pythonLegacy", "javaLegacy", "csharpLegacy")


#: The client options the connections decide, and what to give instead.
_DECIDED: Final = {
    "name": "each alias gets a new database: none to name",
    "db": "each alias gets a new database: none to name",
    "host": "give a server's URI as the first argument",
    "alias": "connect(alias=...)",
    # connect()'s spelling, which pymongo does not know (probe 40, C: accepted unchecked).
    "uuid_representation": "give uuidRepresentation=, or connect(uuid_representation=...)",
}


def _refuse_own_options(options: dict[str, Any], *, client_class: bool = True) -> None:
    """Refuse the client options the connections decide themselves (probe BZ-2: they were
    replaced silently, and a database chosen by ``name=`` was neither used nor dropped); a
    ``mongo_client_class`` too unless ``client_class`` may be given.

    Raises:
        TypeError: naming each such option and what to give instead.
    """
    decided = [f"{key}= ({_DECIDED[key.lower()]})" for key in options if key.lower() in _DECIDED]
    if not client_class and "mongo_client_class" in options:
        decided.append(
            "mongo_client_class= (its clients are mongomock's, or the URI's server's, made "
            "atomic and passed through the hook)"
        )
    if decided:
        raise TypeError(
            f"these options are the test connections' own: {'; '.join(decided)}; the other "
            "keyword arguments go to every client, as mongoengine.connect() takes them"
        )


def _representation(uuid_representation: str | None) -> dict[str, str]:
    # None gives MongoEngine none: it then warns (DeprecationWarning) and uses its default.
    if uuid_representation is None:
        return {}
    if not isinstance(uuid_representation, str):
        raise TypeError(f"uuid_representation must be a str or None, not {uuid_representation!r}")
    if uuid_representation not in UUID_REPRESENTATIONS:
        raise ValueError(
            f"uuid_representation={uuid_representation!r} is not one of pymongo's: expected "
            f"one of {', '.join(map(repr, UUID_REPRESENTATIONS))}, or None"
        )
    return {"uuidRepresentation": uuid_representation}


def _without_database(uri: str, *, username: bool = False) -> str:
    """``uri`` without the database in its path. Where pymongo would authenticate the
    credentials (the URI's, or a ``username`` given beside it) against that database (a
    ``mongodb://`` URI giving neither ``authSource`` nor ``authMechanism``), it is kept as
    ``authSource``; a ``mongodb+srv://`` URI's DNS record may name it instead, and is left to."""
    scheme, found, rest = uri.partition("://")
    if not found:
        return uri  # not a URI: MongoEngine reports it
    rest, _, query = rest.partition("?")
    credentials, at, hosts = rest.rpartition("@")
    hosts, _, path = hosts.partition("/")
    database = path.split(".", 1)[0]  # a path may name a collection too: "db.collection"
    given = {option.split("=", 1)[0].lower() for option in query.replace(";", "&").split("&")}
    if (
        database
        and (credentials or username)
        and scheme == "mongodb"
        and not given & {"authsource", "authmechanism"}
    ):
        query = f"{query}&authSource={database}" if query else f"authSource={database}"
    return f"{scheme}://{credentials}{at}{hosts}/" + (f"?{query}" if query else "")


def _forget_cached_collections(aliases: set[str]) -> None:
    # MongoEngine's disconnect() finds the models to reset by class name in its registry, so a
    # model whose name another model reused (two tests' "Place") keeps a collection of the
    # closed client, and the next test writes to the old database. Reset every model class.
    stack = list(mongoengine.Document.__subclasses__())
    while stack:
        model = stack.pop()
        stack.extend(model.__subclasses__())
        if seam.db_alias(model) in aliases:
            seam.forget_collection(model)


@contextlib.contextmanager
def connected(uri: str | None = None, **client_options: Any) -> Iterator[Connect]:
    """Yield a ``connect(alias=..., uuid_representation=...)`` function; disconnect on exit.

    ``uuid_representation`` is the connection's ``uuidRepresentation`` (default
    ``"standard"``); None gives none, so MongoEngine's default applies.

    Args:
        uri: a MongoDB URI to use a real server (each alias gets a new database, dropped on
            exit, also if the test disconnected the alias; one that could not be dropped is
            named in a ``RuntimeWarning``. A database the URI names is not used, but still
            authenticates the URI's credentials where pymongo would use it); None for mongomock.
        client_options: more keyword arguments for every client (``read_preference=``,
            ``tz_aware=``...), as ``mongoengine.connect()`` takes them.
    """
    connections = _Connections(uri, client_options)
    try:
        yield connections.connect
    finally:
        connections.close()


@fixture
def mongoengine_connect() -> Iterator[Connect]:
    """Connect MongoEngine aliases to fresh mongomock databases for this test."""
    with connected() as connect:
        yield connect


@fixture
def mongoengine_db(mongoengine_connect: Connect) -> Any:
    """MongoEngine's default alias on a fresh mongomock database, for this test."""
    return mongoengine_connect()


# -- thread-safe mongomock ----------------------------------------------------------------------


class _ThreadSafeConnections(_Connections):
    """Like :class:`_Connections`, with mongomock clients whose operations are atomic."""

    def __init__(self, uri: str | None, hook: Hook | None, options: dict[str, Any]) -> None:
        # Its own client class, unless on a server without a hook (see connect()).
        super().__init__(uri, options, client_class=uri is not None and hook is None)
        self._hook = hook

    def connect(
        self, alias: str = DEFAULT_CONNECTION_NAME, *, uuid_representation: Any = _GIVEN
    ) -> Any:
        if self._uri is not None and self._hook is None:
            return super().connect(alias, uuid_representation=uuid_representation)
        client_class = instrumented_client_class(hook=self._hook, server=self._uri is not None)
        return self._connect(alias, uuid_representation, mongo_client_class=client_class)


@contextlib.contextmanager
def connected_threadsafe(
    uri: str | None = None, *, hook: Hook | None = None, **client_options: Any
) -> Iterator[Connect]:
    """:func:`connected`, with every mongomock operation atomic (as on a real server).

    Args:
        uri: a MongoDB URI to use a real server instead.
        hook: ``hook(collection_name, method_name, call)`` runs every database call of the
            clients (under their lock with mongomock); it must return ``call()``'s result or
            raise. ``call`` is a :func:`functools.partial`: ``call.args`` and ``call.keywords``
            are what the call sends (a filter, a document, a DBRef to dereference).
        client_options: as :func:`connected`'s.
    """
    if hook is not None:
        check_callable("hook", hook, "a callable hook(collection_name, method_name, call)")
    connections = _ThreadSafeConnections(uri, hook, client_options)
    try:
        yield connections.connect
    finally:
        connections.close()


@fixture
def mongoengine_connect_threadsafe() -> Iterator[Connect]:
    """``mongoengine_connect`` with atomic mongomock operations (for concurrency tests)."""
    with connected_threadsafe() as connect:
        yield connect
