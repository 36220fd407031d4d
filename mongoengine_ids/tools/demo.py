"""The ``mongoengine-ids demo`` command: the id fields at work, on an embedded or a real database.

The demo is a sequence of sections, :data:`SECTIONS`, each one function taking a :class:`Demo`.
A section defines its models inside the function, with collection names from
:meth:`Demo.meta` (unique to the run, dropped at the end), so the demo can run any number of
times in one process. To show another id strategy, write one more section and add it to
:data:`SECTIONS`.
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TextIO

import mongoengine
from bson.binary import Binary, UuidRepresentation
from bson.codec_options import CodecOptions
from mongoengine import Document, StringField
from mongoengine.connection import ConnectionFailure
from mongoengine.errors import NotUniqueError
from pymongo.errors import PyMongoError

from .. import constants as C
from ..locality import LocalityUUIDField, LocalityUUIDGenerator
from ..random_unique import RandomUniqueField
from ..sequence import SequenceField
from . import uri as mongo_uri
from .cli import CommandError, machine_mac_quietly
from .decode import describe

if TYPE_CHECKING:
    from pymongo.database import Database

    from .cli import Subparsers

#: The database of the demo, unless ``--uri`` names one.
DATABASE: Final = "mongoengine_ids_demo"
#: The MongoEngine alias the demo connects, and disconnects when it ends.
ALIAS: Final = "mongoengine_ids_demo"
_WIDTH: Final = 100


@dataclass
class Demo:
    """What a section needs: where to print, and names for its collections.

    Attributes:
        out: where the demo prints.
        mac_note: what to say about this machine's MAC where the ids' node is shown, if
            anything (see :func:`_mac_note`).
        alias: the MongoEngine alias to put in the models' ``meta``.
        run_id: a token unique to this run, part of every collection name.
        collections: the collections named so far (dropped when the demo ends).
    """

    out: TextIO
    mac_note: str | None = None
    alias: str = ALIAS
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    collections: list[str] = field(default_factory=list)
    _sections: int = field(default=0, init=False, repr=False)

    def meta(self, name: str) -> dict[str, Any]:
        """The ``meta`` of a demo model: the demo's alias and a collection unique to the run."""
        collection = f"demo_{name}_{self.run_id}"
        self.collections.append(collection)
        return {"db_alias": self.alias, "collection": collection}

    def say(self, text: str = "") -> None:
        """Print a paragraph of the demo, indented under the current heading and wrapped."""
        print(
            textwrap.fill(text, _WIDTH, initial_indent="  ", subsequent_indent="  "), file=self.out
        )

    def heading(self, title: str) -> None:
        """Start a section: print its number and ``title``."""
        self._sections += 1
        line = f"{self._sections}. {title}"
        print(f"\n{line}\n{'=' * len(line)}", file=self.out)

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        """Print ``rows`` under ``headers`` in aligned columns."""
        widths = [
            max(len(row[column]) for row in (headers, *rows)) for column in range(len(headers))
        ]
        for row in (headers, ["-" * width for width in widths], *rows):
            cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            print(f"  {'  '.join(cells)}".rstrip(), file=self.out)


Section = Callable[[Demo], None]


def _hex(value: object, digits: int) -> str:
    return f"0x{value:0{digits}x}" if isinstance(value, int) else str(value)


# -- sections ---------------------------------------------------------------------------------


def saved_one_by_one(demo: Demo) -> None:
    """Spread-mode Locality UUIDs, each made by ``save()`` as the document is written."""
    demo.heading("LocalityUUIDField(primary_key=True): save() makes the id")

    class DemoPlace(Document):  # type: ignore[misc]
        id = LocalityUUIDField(primary_key=True)
        name = StringField(required=True)
        meta = demo.meta("place")

    rows = []
    for name in ("Lisbon", "Oslo", "Quito"):
        place = DemoPlace(name=name)
        place.save()
        parts = describe(str(place.id))
        rows.append(
            [
                name,
                str(place.id),
                str(parts["timestamp"]),
                str(parts["pid"]),
                _hex(parts["node"], 7),
                _hex(parts["spread_counter"], 8),
            ]
        )
    demo.say("DemoPlace(name=...).save(), three times:")
    demo.say()
    demo.table(["name", "id", "timestamp", "pid", "node", "spread_counter"], rows)
    demo.say()
    demo.say(f"DemoPlace.objects.count() -> {DemoPlace.objects.count()}")
    demo.say(
        f"Spread mode: the counter steps by 0x{C.SPREAD_STEP:08x} and is written with its hex "
        "digits reversed, so the first characters of consecutive ids differ and writes spread "
        "over range-based shards."
    )
    if demo.mac_note:
        demo.say()
        demo.say(demo.mac_note)


def inserted_in_bulk(demo: Demo) -> None:
    """Sequential-mode Locality UUIDs, made for a whole batch by ``objects.insert()``."""
    demo.heading('LocalityUUIDField(primary_key=True, mode="sequential"): objects.insert()')

    class DemoEvent(Document):  # type: ignore[misc]
        id = LocalityUUIDField(primary_key=True, mode="sequential")
        name = StringField(required=True)
        meta = demo.meta("event")

    names = ("opened", "paid", "packed", "shipped", "delivered")
    events = DemoEvent.objects.insert([DemoEvent(name=name) for name in names])
    rows = []
    for event in events:
        parts = describe(str(event.id))
        rows.append(
            [
                event.name,
                str(event.id),
                str(parts["timestamp"]),
                _hex(parts["sequential_counter"], 8),
            ]
        )
    demo.say(f"DemoEvent.objects.insert([...]) of {len(names)} events, one call for all the ids:")
    demo.say()
    demo.table(["name", "id", "timestamp", "sequential_counter"], rows)
    demo.say()
    demo.say(f"DemoEvent.objects.count() -> {DemoEvent.objects.count()}")
    demo.say(
        "Sequential mode: the counter steps by 1 and is written as is, so ids made together "
        "sort together."
    )


def _raw_id(value: object) -> tuple[str, str]:
    """How a stored ``_id`` looks to pymongo: its type, and the value."""
    if isinstance(value, Binary):
        return f"Binary, subtype {value.subtype}", bytes(value).hex()
    return type(value).__name__, repr(value)


def stored_form(demo: Demo) -> None:
    """What is stored: BSON Binary subtype 4 by default, the text with ``as_string=True``."""
    demo.heading("What the database stores")

    class DemoTicket(Document):  # type: ignore[misc]
        id = LocalityUUIDField(primary_key=True)
        title = StringField(required=True)
        meta = demo.meta("ticket")

    class DemoLabel(Document):  # type: ignore[misc]
        id = LocalityUUIDField(primary_key=True, as_string=True)
        title = StringField(required=True)
        meta = demo.meta("label")

    # Read as stored: with uuidRepresentation="standard", pymongo would turn subtype 4 into a
    # uuid.UUID and hide the difference.
    as_stored: CodecOptions[dict[str, Any]] = CodecOptions(
        uuid_representation=UuidRepresentation.UNSPECIFIED
    )
    rows = []
    for model, declared in (
        (DemoTicket, "LocalityUUIDField(primary_key=True)"),
        (DemoLabel, "LocalityUUIDField(primary_key=True, as_string=True)"),
    ):
        document = model(title="first")
        document.save()
        raw = model._get_collection().with_options(codec_options=as_stored).find_one()
        stored_type, stored_value = _raw_id(raw["_id"])
        found = model.objects(id=str(document.id)).count()
        rows.append([model.__name__, declared, stored_type, stored_value, str(found)])
    demo.table(["model", "field", "stored _id type", "stored _id", "found by text"], rows)
    demo.say()
    demo.say(
        "Binary subtype 4 is 16 bytes in the order they sort, whatever the connection's "
        "uuidRepresentation; queries accept the id, a uuid.UUID, 16 bytes or the text "
        "('found by text' is objects(id=str(id)).count())."
    )


def generated_key_never_replaces(demo: Demo) -> None:
    """A save() whose generated primary key is taken raises; plain MongoEngine overwrites."""
    demo.heading("A generated primary key is inserted, never written over a document")

    def blog_generator() -> LocalityUUIDGenerator:
        # Clock, pid, MAC and counter fixed, so that the next id is known in advance: the
        # example id of Groupon's blog post, 20be0ffc-314a-bd53-7a50-013a65ca76d2.
        return LocalityUUIDGenerator(
            pid=12618,
            mac=0x12345D537A50,
            clock=lambda: 1350327498450,
            counter=(0xCFF0EB02 - C.SPREAD_STEP) & C.LOCALITY_COUNTER_MASK,
        )

    taken = blog_generator().generate()

    class DemoCity(Document):  # type: ignore[misc]
        id = LocalityUUIDField(primary_key=True, generator=blog_generator())
        name = StringField(required=True)
        meta = demo.meta("city")

    class DemoPlainCity(Document):  # type: ignore[misc]
        id = StringField(primary_key=True, default=lambda: str(taken))
        name = StringField(required=True)
        meta = demo.meta("plain_city")

    rows = []
    for model, declared, stored_id in (
        (DemoCity, "LocalityUUIDField(primary_key=True)", Binary(taken.bytes, C.BSON_UUID_SUBTYPE)),
        (DemoPlainCity, "StringField(primary_key=True, default=...)", str(taken)),
    ):
        collection = model._get_collection()
        collection.insert_one({"_id": stored_id, "name": "written elsewhere"})
        document = model(name="new")
        try:
            document.save()
        except NotUniqueError:
            outcome = "raised NotUniqueError"
        else:
            outcome = "returned normally"
        stored = collection.find_one({"_id": stored_id})
        rows.append(
            [model.__name__, declared, outcome, f"name={stored['name']!r}", repr(document.pk)]
        )
    demo.say(
        f"Both models' next id is {taken}, and a document with that _id is already stored, "
        "name='written elsewhere'. Then model(name='new').save():"
    )
    demo.say()
    demo.table(["model", "field", "save()", "stored afterwards", "pk afterwards"], rows)
    demo.say()
    demo.say(
        "MongoEngine's save() replaces a document whose _id it already has (issue 1472); a "
        "generated key is written with insert semantics instead, and a failed save() leaves "
        "the document as it was."
    )


def leased_sequence(demo: Demo) -> None:
    """SequenceField: account numbers from leased counter ranges, one round trip per block."""
    demo.heading(
        "SequenceField(primary_key=True, batch_size=1000, digits=12, zero_pad=True): leased ranges"
    )
    counters = f"demo_counters_{demo.run_id}"
    demo.collections.append(counters)

    class DemoAccount(Document):  # type: ignore[misc]
        id = SequenceField(
            primary_key=True, batch_size=1000, digits=12, zero_pad=True, collection_name=counters
        )
        owner = StringField(required=True)
        meta = demo.meta("account")

    first = DemoAccount(owner="Ada").save()
    batch = DemoAccount.objects.insert([DemoAccount(owner=name) for name in ("Bo", "Cy", "Di")])
    rows = [[account.owner, str(account.id)] for account in (first, *batch)]
    demo.say("DemoAccount(owner=...).save(), then objects.insert() of three more:")
    demo.say()
    demo.table(["owner", "id"], rows)
    demo.say()
    counter = DemoAccount._get_db()[counters].find_one()
    demo.say(f"The counter document: {counter!r}.")
    demo.say(
        "One findAndModify $inc leased values 1 to 1000 for this process; the saves and the bulk "
        "insert took theirs from that block without another round trip. Values left in the block "
        "when the process ends are never used: gaps, never duplicates."
    )


def random_codes(demo: Demo) -> None:
    """RandomUniqueField: random codes under a unique index, a collision retried."""
    demo.heading("RandomUniqueField(length=8): random codes, retried on a collision")

    class DemoVoucher(Document):  # type: ignore[misc]
        code = RandomUniqueField(length=8)
        amount = StringField(required=True)
        meta = demo.meta("voucher")

    vouchers = [DemoVoucher(amount=amount).save() for amount in ("5 EUR", "10 EUR", "20 EUR")]
    demo.table(["amount", "code"], [[v.amount, str(v.code)] for v in vouchers])
    demo.say()
    stats = DemoVoucher.code.stats()
    demo.say(
        f"Crockford base32, 8 characters: {32**8:,} values under a unique index the field created. "
        f"Attempts so far: {stats.attempts}, collisions: {stats.collisions}; a collision on this "
        "field's own index is retried with a fresh value, any other duplicate key is raised."
    )


#: The sections of the demo, in order.
SECTIONS: Final[tuple[Section, ...]] = (
    saved_one_by_one,
    inserted_in_bulk,
    stored_form,
    generated_key_never_replaces,
    leased_sequence,
    random_codes,
)


# -- connection -------------------------------------------------------------------------------


@contextlib.contextmanager
def _connected(uri: str | None) -> Iterator[tuple[Database[Any], str]]:
    """Connect :data:`ALIAS` to mongomock (``uri`` None) or a server; disconnect on exit.

    Yields:
        The database, and a description of where it is.

    Raises:
        CommandError: ``uri`` is not a MongoDB URI (status 2); mongomock is missing, the server
            cannot be reached, or :data:`ALIAS` is already connected (status 1).
    """
    settings: dict[str, Any] = {"uuidRepresentation": "standard"}
    if uri is None:
        try:
            import mongomock
        except ModuleNotFoundError as error:
            if error.name != "mongomock":
                raise
            raise CommandError(
                "the demo's embedded database needs mongomock: pip install "
                "'mongoengine-ids[demo]' (or give --uri mongodb://HOST to use a server)"
            ) from None
        settings["mongo_client_class"] = mongomock.MongoClient
        where = "an embedded mongomock database"
    else:
        target = mongo_uri.parse(uri)
        settings["host"] = target.text
        settings.update(target.client_options())
        where = f"the server at {target.shown}"
    try:
        mongoengine.get_connection(ALIAS)
    except ConnectionFailure:
        pass  # not registered: the alias is free
    else:
        raise CommandError(
            f"the MongoEngine alias {ALIAS!r} is already connected in this process: "
            "disconnect it first"
        )
    try:
        try:
            mongoengine.connect(DATABASE, alias=ALIAS, **settings)
            database = mongoengine.get_db(ALIAS)
            database.command("ping")
        except PyMongoError as error:
            # The URI was checked: what fails now is the server (or the DNS of an SRV host).
            raise CommandError(f"cannot use {where}: {mongo_uri.server_message(error)}") from None
        yield database, where
    finally:
        mongoengine.disconnect(ALIAS)


def _mac_note() -> str | None:
    """A word about the node column, when this machine's MAC may be shared with others."""
    mac, shared = machine_mac_quietly()
    if not shared:
        return None
    octets = ":".join(f"{byte:02x}" for byte in mac.to_bytes(6, "big"))
    return (
        f"Note: the node is the low 28 bits of this machine's MAC, {octets}, a locally "
        "administered address, as containers and virtual machines get and often share. Two "
        "machines with the same node and process id can make the same id in the same "
        f"millisecond: in production, set {C.MAC_ENV_VAR} to an address unique to each machine "
        "(or pass mac= to LocalityUUIDGenerator)."
    )


def _drop(database: Database[Any], collections: Sequence[str]) -> None:
    # Best effort: if the server went away, the error that stopped the demo matters more.
    with contextlib.suppress(PyMongoError):
        for name in collections:
            database.drop_collection(name)


# -- the demo subcommand ----------------------------------------------------------------------


def add_subcommand(subparsers: Subparsers) -> None:
    """Add ``demo [--uri URI]`` to the ``mongoengine-ids`` command.

    Args:
        subparsers: the command's subparsers.
    """
    parser = subparsers.add_parser(
        "demo",
        help="save documents with generated ids and show what is stored",
        description=(
            "Define a few models with generated ids, save documents one by one and in bulk, "
            "and show the ids, their decoded parts and the stored _id. Runs on an embedded "
            "mongomock database (pip install 'mongoengine-ids[demo]'), or on a server with "
            "--uri. The demo's collections are named demo_*_RUNID and dropped at the end."
        ),
    )
    parser.add_argument(
        "--uri",
        metavar="URI",
        help=(
            f"a MongoDB URI (mongodb://[USER:PASSWORD@]HOST[:PORT][/DATABASE]); the demo uses "
            f"the database the URI names, else {DATABASE!r}"
        ),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run every section of the demo on the database chosen by ``args.uri``.

    Args:
        args: the parsed arguments: ``uri`` (str or None).

    Returns:
        0.

    Raises:
        CommandError: the database cannot be used (see :func:`_connected`).
    """
    demo = Demo(out=sys.stdout, mac_note=_mac_note())
    with _connected(args.uri) as (database, where):
        print(f"mongoengine-ids demo: database {database.name!r} on {where}", file=demo.out)
        try:
            for section in SECTIONS:
                section(demo)
        finally:
            _drop(database, demo.collections)
    print(
        f"\nDropped the demo's {len(demo.collections)} collections (demo_*_{demo.run_id}) and "
        f"disconnected the MongoEngine alias {ALIAS!r}.",
        file=demo.out,
    )
    return 0
