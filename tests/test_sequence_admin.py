"""The counters admin API and ``mongoengine-ids counters list|show|set``."""

from __future__ import annotations

import argparse
import datetime as dt
import io
import re
from collections.abc import Callable
from typing import Any

import pytest
from _support import TEST_URI
from mongoengine import Document, StringField
from mongoengine import fields as me_fields

from mongoengine_ids import backfill
from mongoengine_ids.errors import CorruptedCounterError
from mongoengine_ids.sequence.admin import (
    has_scoped_counters,
    list_counters,
    set_next_value,
    show_counter,
)
from mongoengine_ids.sequence.field import DEFAULT_COLLECTION, INT64_MAX, Sequence, SequenceField
from mongoengine_ids.testing import connected
from mongoengine_ids.tools.cli import CommandError, main
from mongoengine_ids.tools.sequence_cli import (
    CORRUPTED_NOTE,
    EMBEDDED_NOTE,
    FAILED,
    OK,
    SHARDED_NOTE,
    USAGE_ERROR,
    add_subcommand,
    run,
)
from mongoengine_ids.tools.uri import EXPECTED


def test_list_groups_shards_and_scopes(mongoengine_db: Any) -> None:
    class Legacy(Document):
        id = me_fields.SequenceField(primary_key=True)

    class Invoice(Document):
        tenant = StringField()
        number = SequenceField(scope="tenant")

    Legacy().save()
    Invoice(tenant="acme").save()
    sharded = Sequence("cards", database=mongoengine_db, start=0, digits=3, shards=4)
    sharded.next_values(3)
    infos = list_counters(mongoengine_db)
    assert [(i.name, i.scope, i.sharded) for i in infos] == [
        ("cards", None, True),
        ("invoice.number", "acme", False),
        ("legacy.id", None, False),
    ]
    cards, invoice, legacy = infos
    assert legacy.next_value == 2
    assert legacy.headroom() == INT64_MAX - 1
    assert invoice.next_value == 2
    assert len(cards.shards) == 1  # shards are created on first use
    (shard,) = cards.shards
    assert shard.next is not None
    assert shard.low is not None
    assert shard.next == shard.low + 2
    assert cards.headroom() == 250 - 3


def test_show_reports_headroom_and_problems(mongoengine_db: Any) -> None:
    mongoengine_db[DEFAULT_COLLECTION].insert_many(
        [
            {"_id": "s#0", "next": 99, "low": 0, "high": 99, "sequence": "s", "shard": 0},
            {"_id": "s#1", "next": 149, "low": 100, "high": 199, "sequence": "s", "shard": 1},
            {"_id": "s#2", "next": "x", "low": 200, "high": 299, "sequence": "s", "shard": 2},
            {"_id": "plain", "next": 41},
        ]
    )
    info = show_counter(mongoengine_db, "s")
    assert [shard.headroom() for shard in info.shards] == [0, 50, None]
    assert info.headroom() is None
    assert info.problems == ["'s#2': 'next' is 'x'; expected an integer"]
    plain = show_counter(mongoengine_db, "plain")
    assert plain.next_value == 42
    assert plain.headroom(high=99) == 58
    with pytest.raises(LookupError, match="no counter 'missing'"):
        show_counter(mongoengine_db, "missing")


def test_set_moves_up_only_unless_forced(mongoengine_db: Any) -> None:
    collection = mongoengine_db[DEFAULT_COLLECTION]
    info = set_next_value(mongoengine_db, "new", 1000)  # created
    assert info.next_value == 1000
    assert collection.find_one({"_id": "new"}) == {"_id": "new", "next": 999}
    with pytest.raises(ValueError, match=r"counter 'new' is at 999: the next value is 1000"):
        set_next_value(mongoengine_db, "new", 10)
    assert collection.find_one({"_id": "new"}) == {"_id": "new", "next": 999}
    set_next_value(mongoengine_db, "new", 10, force=True)
    assert collection.find_one({"_id": "new"}) == {"_id": "new", "next": 9}
    sequence = Sequence("new", database=mongoengine_db)
    assert sequence.next() == 10
    with pytest.raises(TypeError, match="value must be an int, not '5'"):
        set_next_value(mongoengine_db, "new", "5")  # type: ignore[arg-type]


@pytest.mark.parametrize("stored", [{"next": "x"}, {"next": 4.5}, {}])
def test_set_refuses_a_corrupted_counter_unless_forced(
    mongoengine_db: Any, stored: dict[str, Any]
) -> None:
    """A counter whose ``next`` is not an integer, which ``show`` reports corrupted, is not
    set without ``force`` (found by review AG: a string failed with Python's own error, the
    others were overwritten)."""
    collection = mongoengine_db[DEFAULT_COLLECTION]
    collection.insert_one({"_id": "bad.n", **stored})
    with pytest.raises(ValueError, match=r"counter 'bad.n' is corrupted: 'next' is .*use force"):
        set_next_value(mongoengine_db, "bad.n", 5)
    assert collection.find_one({"_id": "bad.n"}) == {"_id": "bad.n", **stored}
    status, _, err = _cli(mongoengine_db)("set", "bad.n", "5")
    assert status == FAILED
    assert err.startswith("set: counter 'bad.n' is corrupted")
    assert collection.find_one({"_id": "bad.n"}) == {"_id": "bad.n", **stored}
    set_next_value(mongoengine_db, "bad.n", 5, force=True)
    assert collection.find_one({"_id": "bad.n"}) == {"_id": "bad.n", "next": 4}


def test_set_on_a_sharded_sequence_moves_the_owning_shard(mongoengine_db: Any) -> None:
    sequence = Sequence("cards", database=mongoengine_db, start=0, digits=2, shards=2)
    store = sequence.store()
    for shard in range(2):
        store.create(store.counter(shard))
    set_next_value(mongoengine_db, "cards", 75)
    assert mongoengine_db[DEFAULT_COLLECTION].find_one({"_id": "cards#1"})["next"] == 74
    with pytest.raises(ValueError, match=r"value=100 is in no shard of 'cards'"):
        set_next_value(mongoengine_db, "cards", 100)


def test_a_scope_holding_the_shard_separator_is_not_another_scopes_shard(
    mongoengine_db: Any,
) -> None:
    """Found by a probe: shard 1 of scope "a" is "cards@a#1", as the counter of scope "a#1"
    would be named; show and set took the one for the other."""
    for scope, shards in (("a", [1]), ("a#1", [0, 1])):
        store = Sequence("cards", database=mongoengine_db, digits=2, shards=2, scope=scope).store()
        for shard in shards:
            store.create(store.counter(shard))
    shown = show_counter(mongoengine_db, "cards", scope="a#1")
    assert shown.scope == "a#1"
    assert [s.document_id for s in shown.shards] == ["cards@a#1#0", "cards@a#1#1"]
    set_next_value(mongoengine_db, "cards", 71, scope="a#1")  # in shard 1 (50..99)
    stored = {doc["_id"]: doc["next"] for doc in mongoengine_db[DEFAULT_COLLECTION].find()}
    assert stored == {"cards@a#1": 49, "cards@a#1#0": 0, "cards@a#1#1": 70}


def test_a_scope_read_back_as_another_type_is_found() -> None:
    """Review: matching by the text of the stored ``scope`` missed a datetime read back aware
    (``tz_aware=True``: "+00:00" in its text, not in the counter's _id), and set_next_value()
    wrote the counter, then raised LookupError."""

    class Day(Document):
        day = me_fields.DateTimeField(required=True)
        n = SequenceField(scope="day")

    when = dt.datetime(2024, 5, 1, 12, 0)
    with connected(TEST_URI, tz_aware=True) as connect:
        db = connect()
        Day(day=when).save()
        assert show_counter(db, "day.n", scope=when).shards[0].next == 1
        assert set_next_value(db, "day.n", 50, scope=when).shards[0].next == 49
        assert Day(day=when).save().n == 50


def test_set_on_a_scoped_sequence(mongoengine_db: Any) -> None:
    class Invoice(Document):
        tenant = StringField()
        number = SequenceField(scope="tenant")

    Invoice(tenant="acme").save()
    set_next_value(mongoengine_db, "invoice.number", 500, scope="acme")
    invoice = Invoice(tenant="acme")
    invoice.save()
    assert invoice.number == 500
    # Probe R: without a scope, the error said only that there was no such counter.
    with pytest.raises(LookupError, match=r"'invoice\.number' is numbered per scope: name one"):
        show_counter(mongoengine_db, "invoice.number")
    # A counter without scope beside them is refused: the field would refuse it on the first
    # save of every new scope (review W; a name is numbered with scope= or without, not both).
    assert has_scoped_counters(mongoengine_db, "invoice.number")
    with pytest.raises(ValueError, match="has counters per scope and none without: give scope="):
        set_next_value(mongoengine_db, "invoice.number", 900)
    assert mongoengine_db[DEFAULT_COLLECTION].find_one({"_id": "invoice.number"}) is None
    assert not has_scoped_counters(mongoengine_db, "other.number")


@pytest.mark.parametrize("force", [False, True])
def test_set_makes_a_new_scoped_counter_as_the_sequence_would(
    mongoengine_db: Any, force: bool
) -> None:
    """Review AS: with force=True, a new scoped counter lacked its sequence and scope, and was
    listed as a sequence of its own."""

    class Bill(Document):
        tenant = StringField()
        number = SequenceField(scope="tenant")

    set_next_value(mongoengine_db, "bill.number", 7, scope="zeta", force=force)
    stored = mongoengine_db[DEFAULT_COLLECTION].find_one({"_id": "bill.number@zeta"})
    assert stored == {
        "_id": "bill.number@zeta",
        "next": 6,
        "sequence": "bill.number",
        "scope": "zeta",
    }
    assert [(info.name, info.scope) for info in list_counters(mongoengine_db)] == [
        ("bill.number", "zeta")
    ]
    assert Bill(tenant="zeta").save().number == 7


def test_set_drops_this_processs_leased_blocks(mongoengine_db: Any) -> None:
    class Ticket(Document):
        number = SequenceField(batch_size=100)

    assert Ticket().save().number == 1  # 2..100 leased
    set_next_value(mongoengine_db, "ticket.number", 500)
    assert Ticket().save().number == 500


# -- the command line ---------------------------------------------------------------------------


def _cli(db: Any) -> Callable[..., tuple[int, str, str]]:
    parser = argparse.ArgumentParser(prog="mongoengine-ids")
    add_subcommand(
        parser.add_subparsers(dest="command"), open_database=lambda args: (db, lambda: None)
    )

    def invoke(*argv: str) -> tuple[int, str, str]:
        args = parser.parse_args(["counters", *argv])
        out = io.StringIO()
        try:
            status = run(args, open_database=lambda _: (db, lambda: None), out=out)
        except CommandError as error:
            return error.status, out.getvalue(), str(error)
        assert args.func is not None
        return status, out.getvalue(), ""

    return invoke


def test_cli_show_of_a_sharded_sequence_says_only_the_shards_made_count(
    mongoengine_db: Any,
) -> None:
    """Probe: the headroom of the shards made so far read as the sequence's, and a value of a
    shard not made yet was refused as in no shard of the sequence."""

    class Card(Document):
        number = SequenceField(start=0, digits=2, shards=2, batch_size=5)

    Card().save()
    (made,) = mongoengine_db[DEFAULT_COLLECTION].find()
    status, out, _ = _cli(mongoengine_db)("show", "card.number")
    assert status == OK
    assert "shards:     1 made so far (0 exhausted)" in out
    headroom = made["high"] - made["next"]
    assert f"headroom:   {headroom:,} values before exhaustion (in the shards made so far)" in out
    other = 75 if made["shard"] == 0 else 25
    status, _, err = _cli(mongoengine_db)("set", "card.number", str(other))
    assert status == FAILED
    assert f"value={other} is in no shard of 'card.number' made so far" in err
    assert "made when the field first uses it" in err


def test_a_shard_not_used_yet_has_no_last_value_and_a_corrupted_one_no_headroom(
    mongoengine_db: Any,
) -> None:
    """The admin API under the CLI's lines: a shard made by a lease that went to another
    holds the value before its own (not handed out); bounds that are not integers are read as
    no bounds, and counted no headroom (it was the end of an int64)."""
    mongoengine_db[DEFAULT_COLLECTION].insert_many(
        [
            {"_id": "t#0", "next": 7, "low": 0, "high": 49, "sequence": "t", "shard": 0},
            {"_id": "t#1", "next": 49, "low": 50, "high": 99, "sequence": "t", "shard": 1},
            {"_id": "u#0", "next": 4, "low": "0", "high": 49, "sequence": "u", "shard": 0},
            {"_id": "fresh", "next": -1},
        ]
    )
    two = show_counter(mongoengine_db, "t")
    assert [shard.last for shard in two.shards] == [7, None]
    assert two.last == 7
    assert two.headroom() == 42 + 50
    bad = show_counter(mongoengine_db, "u")
    assert (bad.shards[0].headroom(), bad.headroom(), bad.last) == (None, None, None)
    fresh = show_counter(mongoengine_db, "fresh")
    assert (fresh.last, fresh.next_value) == (None, 0)


def test_cli_show_labels_each_shards_last_value(mongoengine_db: Any) -> None:
    """Probe: a shard's line said "next" of its 'next', the last value handed out; and a shard
    made but not used yet (its 'next' is the value before its own) made the last value."""

    class Badge(Document):
        number = SequenceField(start=0, digits=2, shards=2, batch_size=5)

    first = Badge().save().number
    counters = mongoengine_db[DEFAULT_COLLECTION]
    (made,) = counters.find()
    assert made["next"] == first + 4  # the block of 5 leased: 'next' is its last value
    other = 1 - made["shard"]
    low, high = (50, 99) if other == 1 else (0, 49)
    counters.insert_one(  # as the field makes a shard, before its first lease
        {"_id": f"badge.number#{other}", "sequence": "badge.number", "shard": other}
        | {"low": low, "high": high, "next": low - 1}
    )
    status, out, _ = _cli(mongoengine_db)("show", "badge.number")
    assert status == OK
    assert f"last value: {first + 4}  (highest handed out or leased)\n" in out
    assert (
        f"  badge.number#{made['shard']}: last {first + 4}, owns {made['low']}..{made['high']}, "
        f"headroom {made['high'] - first - 4}\n"
    ) in out
    assert f"  badge.number#{other}: last -, owns {low}..{high}, headroom 50\n" in out


def test_cli_says_a_shard_with_bounds_that_are_not_integers_is_corrupted(
    mongoengine_db: Any,
) -> None:
    """Probe: read as an unbounded counter, it had a next value and an int64 headroom."""
    mongoengine_db[DEFAULT_COLLECTION].insert_one(
        {"_id": "bad.number#0", "sequence": "bad.number", "shard": 0}
        | {"low": "0", "high": 49, "next": 4}  # low: text, set by hand
    )
    cli = _cli(mongoengine_db)
    status, out, _ = cli("show", "bad.number")
    assert status == OK
    assert out == (
        "counter:    bad.number\n"
        "last value: -  (highest handed out or leased)\n"
        f"next value: {CORRUPTED_NOTE}\n"
        f"headroom:   {CORRUPTED_NOTE}\n"
        "CORRUPTED 'bad.number#0': bounds are low='0', high=49; expected integers\n"
    )
    status, out, _ = cli("list")
    assert out.splitlines()[2].split()[:3] == ["bad.number", "-", "-"]  # next value, headroom


def test_cli_notes_a_counter_below_any_start(mongoengine_db: Any) -> None:
    """Probe: 'next' -5 showed the next value -4, which no field hands out, without a word."""
    counters = mongoengine_db[DEFAULT_COLLECTION]
    counters.insert_one({"_id": "negative.number", "next": -5})
    cli = _cli(mongoengine_db)
    status, out, _ = cli("show", "negative.number", "--digits", "3")
    assert status == OK
    assert out == (
        "counter:    negative.number\n"
        "last value: -  (highest handed out or leased)\n"
        "next value: the field's start\n"
        "headroom:   1,000 values before exhaustion\n"
        "note:       'next' is -5, below the start of any field (the package writes -1 at the "
        "lowest): set by hand; the field moves it up to its start when it next leases\n"
    )
    row = cli("list")[1].splitlines()[2]
    assert row.split()[:3] == ["negative.number", "-", f"{INT64_MAX + 1:,}"]
    assert row.endswith("when it next leases")

    class Negative(Document):  # what the note says
        number = SequenceField(start=3, batch_size=1)

    assert Negative().save().number == 3
    assert counters.find_one({"_id": "negative.number"})["next"] == 3


def test_cli_says_a_counter_id_is_not_a_str(mongoengine_db: Any) -> None:
    """Probe: ``{_id: 42}`` was listed as 42, and ``show 42`` said there was no such counter."""
    counters = mongoengine_db[DEFAULT_COLLECTION]
    counters.insert_many([{"_id": 42, "next": 7}, {"_id": "order.id", "next": 9}])
    cli = _cli(mongoengine_db)
    status, _, err = cli("show", "42")
    assert status == FAILED
    assert err == (
        f"show: no counter '42' in {mongoengine_db.name}.{DEFAULT_COLLECTION}: _id 42 is int, "
        "not str: no field's counter (a counter's _id is its sequence name); fix or delete it "
        "by hand"
    )
    lines = cli("list")[1].splitlines()
    assert lines[2].endswith(
        "_id 42 is int, not str: no field's counter (a counter's _id is its sequence name)"
    )
    assert lines[3].split() == ["order.id", "10", f"{INT64_MAX - 9:,}"]  # no note


class ScopedByNumber(Document):
    tenant = me_fields.IntField()
    number = SequenceField(scope="tenant")


def test_cli_scope_is_text_and_names_a_number_scopes_counter(mongoengine_db: Any) -> None:
    """Probe: ``--scope 7`` stored the scope as '7' where the field stores 7, without a word.
    The counter is named by the text either way: the field uses the one made."""
    counters = mongoengine_db[DEFAULT_COLLECTION]
    cli = _cli(mongoengine_db)
    status, out, _ = cli("set", "scoped_by_number.number", "5", "--scope", "7")
    assert status == OK
    assert counters.find_one({"_id": "scoped_by_number.number@7"}) == {
        "_id": "scoped_by_number.number@7",
        "next": 4,
        "sequence": "scoped_by_number.number",
        "scope": "7",
    }
    assert (
        "--scope is text: the scope is stored as '7' (a field whose scope holds numbers stores "
        "a number, in the same counter: the _id is the same); to store a number, use "
        "set_next_value(..., scope=7) in Python)"
    ) in out
    assert ScopedByNumber(tenant=7).save().number == 5
    # A counter the field made, its scope a number, is shown and moved by its text.
    ScopedByNumber(tenant=8).save()
    assert counters.find_one({"_id": "scoped_by_number.number@8"})["scope"] == 8
    status, out, _ = cli("set", "scoped_by_number.number", "20", "--scope", "8")
    assert (status, "a new counter" in out) == (OK, False)
    assert counters.find_one({"_id": "scoped_by_number.number@8"})["scope"] == 8
    assert "next value: 20" in cli("show", "scoped_by_number.number", "--scope", "8")[1]
    # Text that is no number as the field writes one: no such note.
    assert "--scope is text" not in cli("set", "scoped_by_number.number", "1", "--scope", "07")[1]


def test_cli_list_show_set(mongoengine_db: Any) -> None:
    cli = _cli(mongoengine_db)
    assert cli("list") == (OK, "no counters\n", "")
    status, out, _ = cli("set", "order.id", "100")
    assert status == OK
    assert "next value: 100" in out
    status, out, _ = cli("list")
    assert status == OK
    assert out.splitlines()[0].split() == [
        "counter",
        "scope",
        "next",
        "value",
        "shards",
        "headroom",
        "problem",
    ]
    assert out.splitlines()[2].split()[:2] == ["order.id", "100"]
    status, out, _ = cli("show", "order.id", "--digits", "4")
    assert status == OK
    assert "headroom:   9,900 values before exhaustion" in out
    status, _, err = cli("set", "order.id", "5")
    assert status == FAILED
    assert err.startswith("set: ")
    assert "moving it down can hand values out twice" in err
    assert mongoengine_db[DEFAULT_COLLECTION].find_one({"_id": "order.id"})["next"] == 99
    assert cli("set", "order.id", "5", "--force")[0] == OK
    assert mongoengine_db[DEFAULT_COLLECTION].find_one({"_id": "order.id"})["next"] == 4
    status, _, err = cli("show", "nothing")
    assert status == FAILED
    assert err.startswith("show: no counter 'nothing'")


def test_set_to_zero_restarts_a_field_that_starts_at_zero(mongoengine_db: Any) -> None:
    class Ticket(Document):
        id = SequenceField(primary_key=True, start=0, batch_size=1)

    assert [Ticket().save().id for _ in range(2)] == [0, 1]
    Ticket.objects.delete()
    info = set_next_value(mongoengine_db, "ticket.id", 0, force=True)
    assert info.next_value == 0
    assert mongoengine_db[DEFAULT_COLLECTION].find_one({"_id": "ticket.id"})["next"] == -1
    Ticket().save()
    assert [d["_id"] for d in Ticket._get_collection().find()] == [0]
    status, out, _ = _cli(mongoengine_db)("set", "other.id", "0")
    assert status == OK
    assert "last value: -  (highest handed out or leased)\nnext value: 0" in out


def test_cli_set_says_when_it_made_the_counter(mongoengine_db: Any) -> None:
    cli = _cli(mongoengine_db)
    status, out, _ = cli("set", "order.id", "100")
    assert status == OK
    assert "(a new counter: there was none named 'order.id'; if that name is misspelt" in out
    status, out, _ = cli("set", "order.id", "200")
    assert status == OK
    assert "next value: 200" in out
    assert "a new counter" not in out  # it existed
    status, out, _ = cli("set", "order.idd", "300")  # a misspelt name makes a counter too
    assert "there was none named 'order.idd'" in out
    assert mongoengine_db[DEFAULT_COLLECTION].find_one({"_id": "order.id"})["next"] == 199
    status, out, _ = cli("set", "invoice.number", "5", "--scope", "acme")
    assert "there was none named 'invoice.number' with scope 'acme'" in out
    status, out, _ = cli("set", "invoice.number", "6", "--scope", "acme")
    assert "a new counter" not in out
    assert sorted(d["_id"] for d in mongoengine_db[DEFAULT_COLLECTION].find()) == [
        "invoice.number@acme",
        "order.id",
        "order.idd",
    ]
    # Without --scope on a name numbered per scope (probe R): refused, nothing made.
    status, out, err = cli("set", "invoice.number", "7")
    assert status != OK
    assert "has counters per scope and none without: give scope=" in out + err
    assert mongoengine_db[DEFAULT_COLLECTION].find_one({"_id": "invoice.number"}) is None


def test_cli_handler_is_registered_with_the_parser(mongoengine_db: Any) -> None:
    parser = argparse.ArgumentParser(prog="mongoengine-ids")
    add_subcommand(
        parser.add_subparsers(dest="command"),
        open_database=lambda args: (mongoengine_db, lambda: None),
    )
    args = parser.parse_args(["counters", "set", "x", "7"])
    assert args.func(args) == OK
    assert mongoengine_db[DEFAULT_COLLECTION].find_one({"_id": "x"}) == {"_id": "x", "next": 6}


def test_cli_reports_a_database_error_in_one_line() -> None:
    import pymongo.errors

    class Unreachable:
        name = "shop"

        def get_collection(self, *args: Any, **kwargs: Any) -> Any:
            raise pymongo.errors.ServerSelectionTimeoutError(
                "localhost:1: connection refused, Timeout: 3.0s, Topology Description: <...>"
            )

    cli = _cli(Unreachable())
    status, out, err = cli("list")
    assert status == FAILED
    assert out == ""
    assert err == "list: ServerSelectionTimeoutError: localhost:1: connection refused"


def test_counters_without_uri_uses_an_embedded_database(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("MONGOENGINE_IDS_URI", raising=False)

    assert main(["counters", "list"]) == OK
    captured = capsys.readouterr()
    assert captured.out == f"no counters\n\n({EMBEDDED_NOTE})\n"
    assert captured.err == ""

    assert main(["counters", "--db", "shop", "set", "order.id", "500"]) == OK
    assert "next value: 500" in capsys.readouterr().out
    # Each run starts from an empty database.
    assert main(["counters", "show", "order.id"]) == FAILED
    err = capsys.readouterr().err
    assert "show: no counter 'order.id'" in err
    # The error says why the counter just set is not there.
    assert err.rstrip("\n").endswith(f"({EMBEDDED_NOTE})")


def test_counters_reads_the_uri_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MONGOENGINE_IDS_URI", "localhost:27017/shop")

    assert main(["counters", "list"]) == USAGE_ERROR
    assert capsys.readouterr().err == (
        "mongoengine-ids: error: counters: $MONGOENGINE_IDS_URI 'localhost:27017/shop' is not "
        f"a MongoDB URI: {EXPECTED}\n"
    )


def test_counters_on_a_server_needs_a_database(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["counters", "--uri", "mongodb://u:s3cret@127.0.0.1:1", "list"]) == USAGE_ERROR
    assert capsys.readouterr().err == (
        "mongoengine-ids: error: counters: no database: give --db NAME or name one in the URI "
        "('mongodb://u:***@127.0.0.1:1')\n"
    )


def test_counters_help_is_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["counters", "--help"]) == OK
    out = capsys.readouterr().out
    assert out.startswith("usage: mongoengine-ids counters ")
    assert "``" not in out  # not a docstring
    assert "embedded mongomock database" in out
    assert "examples:\n  mongoengine-ids counters list\n" in out


def test_the_database_is_a_database_or_an_alias(mongoengine_db: Any) -> None:
    """Found by a probe: an alias (which ``Sequence`` takes) or junk raised AttributeError."""
    collection = mongoengine_db[DEFAULT_COLLECTION]
    assert set_next_value("default", "by_alias", 7).next_value == 7
    assert collection.find_one({"_id": "by_alias"}) == {"_id": "by_alias", "next": 6}
    assert show_counter("default", "by_alias").next_value == 7
    assert [info.name for info in list_counters("default")] == ["by_alias"]
    for junk in (None, 5, b"default"):
        expected = (
            r"database must be a pymongo Database or a MongoEngine alias \(str\), "
            rf"not {re.escape(repr(junk))}$"
        )
        with pytest.raises(TypeError, match=expected):
            list_counters(junk)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=expected):
            show_counter(junk, "by_alias")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=expected):
            set_next_value(junk, "by_alias", 100)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"database='' is empty"):
        list_counters("")
    assert list(collection.find()) == [{"_id": "by_alias", "next": 6}]


def test_set_on_a_new_scope_of_a_sharded_field_makes_its_shard(mongoengine_db: Any) -> None:
    """Probe: the admin API made an unsharded counter for a new scope of a sharded field,
    which the field then refused (CorruptedCounterError) for that scope."""

    class Stub(Document):
        tenant = StringField()
        number = SequenceField(scope="tenant", shards=2, digits=2, start=0)

    Stub(tenant="acme").save()  # one shard made: 0 owns 0..49 (1 owns 50..99)
    counters = mongoengine_db[DEFAULT_COLLECTION]
    (made,) = counters.find({"scope": "acme"})
    other = 70 if made["shard"] == 0 else 20  # in the shard no scope has used: bounds unknown
    known = re.escape(f"own {made['low']}..{made['high']}")
    refused = rf"value={other} is in no shard of 'stub.number'.*{known}"
    with pytest.raises(ValueError, match=refused):
        set_next_value(mongoengine_db, "stub.number", other, scope="x")
    assert counters.count_documents({"scope": "x"}) == 0

    value = 20 if made["shard"] == 0 else 70
    set_next_value(mongoengine_db, "stub.number", value, scope="zeta")
    stored = counters.find_one({"scope": "zeta"})
    assert stored == {
        "_id": f"stub.number@zeta#{made['shard']}",
        "next": value - 1,
        "sequence": "stub.number",
        "scope": "zeta",
        "shard": made["shard"],
        "low": made["low"],
        "high": made["high"],
    }
    numbers = [Stub(tenant="zeta").save().number for _ in range(40)]
    assert len(set(numbers)) == 40
    mine = {n for n in numbers if made["low"] <= n <= made["high"]}
    assert mine == set(range(value, value + len(mine)))  # the set shard goes on from value


def test_set_refuses_a_shard_name_that_has_no_counter(mongoengine_db: Any) -> None:
    """Probe BE: ``counters set ticket.number#1 7000`` (a shard's ``_id``, as ``show`` prints
    it) made an unbounded counter of that name, which the field then refused on every save."""

    class Ticket(Document):
        number = SequenceField(start=0, digits=2, shards=2, batch_size=1)

    Ticket().save()
    counters = mongoengine_db[DEFAULT_COLLECTION]
    (made,) = counters.find()
    shard, other = made["shard"], 1 - made["shard"]
    before = list(counters.find())
    not_made = (
        rf"no counter 'ticket.number#{other}' in .*, and a name ending in '#{other}' is a "
        r"shard's: .*save a document first, then name the sequence \('ticket.number'.*"
        "nothing was changed"
    )
    with pytest.raises(ValueError, match=not_made):
        set_next_value(mongoengine_db, f"ticket.number#{other}", 50)
    made_by_the_field = (
        rf"'ticket.number#{shard}' is the counter of shard {shard} of sequence "
        r"'ticket.number', not a sequence: name the sequence"
    )
    with pytest.raises(ValueError, match=made_by_the_field):
        set_next_value(mongoengine_db, f"ticket.number#{shard}", made["high"])
    status, out, err = _cli(mongoengine_db)("set", f"ticket.number#{other}", "50")
    assert (status, out) == (FAILED, "")
    assert err.startswith(f"set: no counter 'ticket.number#{other}' in ")
    assert list(counters.find()) == before
    numbers = [Ticket().save().number for _ in range(6)]  # on either shard: none refused
    assert len(set(numbers)) == 6
    # A counter whose own name ends so (a sequence_name) is set as any other.
    counters.insert_one({"_id": "legacy#2", "next": 5})
    assert set_next_value(mongoengine_db, "legacy#2", 10).next_value == 10


def test_cli_set_says_that_a_sharded_field_makes_its_own_counters(mongoengine_db: Any) -> None:
    """Probe BE: set before a sharded field's first save makes an unsharded counter, which the
    field refuses on every save: the note after the output says so, and how to undo it."""

    class Card(Document):
        number = SequenceField(start=0, digits=4, shards=2)

    class Stamp(Document):
        tenant = StringField()
        number = SequenceField(scope="tenant", start=0, digits=2, shards=2)

    cli = _cli(mongoengine_db)
    status, out, _ = cli("set", "card.number", "100")
    assert status == OK
    assert out.endswith(f"`counters list` shows them all. {SHARDED_NOTE})\n")
    counters = mongoengine_db[DEFAULT_COLLECTION]
    with pytest.raises(CorruptedCounterError):
        Card().save()
    counters.delete_one({"_id": "card.number"})  # as the note says
    assert Card().save().number in (0, 5000)
    # A new scope's counter made as a shard, laid out as the other scopes': no such note.
    Stamp(tenant="acme").save()
    (made,) = counters.find({"scope": "acme"})
    status, out, _ = cli("set", "stamp.number", str(made["low"] + 5), "--scope", "zeta")
    assert status == OK
    assert "there was none named 'stamp.number' with scope 'zeta'" in out
    assert SHARDED_NOTE not in out


def test_counters_options_are_taken_after_the_action_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Probe BE: ``counters list --uri URI`` was refused (unrecognized arguments), although
    ``counters --help`` lists ``--uri``."""
    monkeypatch.delenv("MONGOENGINE_IDS_URI", raising=False)
    parser = argparse.ArgumentParser(prog="mongoengine-ids")
    add_subcommand(parser.add_subparsers(dest="command"))

    def options(*argv: str) -> tuple[Any, ...]:
        args = parser.parse_args(["counters", *argv])
        return args.uri, args.db, args.collection

    assert options("list") == (None, None, DEFAULT_COLLECTION)
    assert options("list", "--uri", "mongodb://db/shop", "--db", "x", "--collection", "c") == (
        "mongodb://db/shop",
        "x",
        "c",
    )
    assert options("--db", "x", "set", "n", "5") == (None, "x", DEFAULT_COLLECTION)  # kept
    assert options("--db", "x", "show", "n", "--db", "y") == (None, "y", DEFAULT_COLLECTION)
    # Used, not only accepted:
    assert main(["counters", "list", "--uri", "localhost:27017/shop"]) == USAGE_ERROR
    assert "counters: --uri 'localhost:27017/shop' is not a MongoDB URI" in capsys.readouterr().err
    assert main(["counters", "set", "order.id", "5", "--db", "shop"]) == OK
    assert "next value: 5" in capsys.readouterr().out


# -- scopes the driver decodes as dicts (probe AM) ----------------------------------------------


class AdminPlace(me_fields.EmbeddedDocument):
    city = StringField()


class AdminVisit(Document):
    place = me_fields.EmbeddedDocumentField(AdminPlace)
    n = SequenceField(scope="place")
    meta = {"collection": "admin_visits"}


class AdminTenant(Document):
    name = StringField()
    meta = {"collection": "admin_tenants"}


class AdminOwned(Document):
    owner = me_fields.GenericReferenceField()
    n = SequenceField(scope="owner")
    meta = {"collection": "admin_owned"}


def _write_past_mongoengine(model: Any, stored: dict[str, Any]) -> None:
    """Numbers 2 to 5 in the scope of the stored document, written as an import would."""
    collection = model._get_collection()
    for number in range(2, 6):
        collection.insert_one({**stored, "n": number, "_id": f"import-{number}"})


def test_a_scope_as_listed_names_the_counter_the_field_uses(mongoengine_db: Any) -> None:
    # An embedded document's or a generic reference's scope is decoded as a dict, whose text
    # named a second counter: set_next_value() with it moved that one, and the field handed
    # out 2 again in a scope holding 2 to 5.
    visit = AdminVisit(place=AdminPlace(city="x")).save()
    owned = AdminOwned(owner=AdminTenant(name="a").save()).save()
    for model, document in ((AdminVisit, visit), (AdminOwned, owned)):
        stored = model._get_collection().find_one({"_id": document.id}, {"_id": 0, "n": 0})
        _write_past_mongoengine(model, stored)
    infos = list_counters(mongoengine_db)
    assert [(info.name, info.next_value) for info in infos] == [
        ("admin_owned.n", 2),
        ("admin_visits.n", 2),
    ]
    for info in infos:
        assert show_counter(mongoengine_db, info.name, scope=info.scope) == info
        set_next_value(mongoengine_db, info.name, 6, scope=info.scope)
    assert AdminVisit(place=AdminPlace(city="x")).save().n == 6
    assert AdminOwned(owner=owned.owner).save().n == 6
    counters = mongoengine_db[DEFAULT_COLLECTION]
    assert counters.count_documents({}) == 2  # no second counter was made
    assert [(i.name, i.next_value) for i in list_counters(mongoengine_db)] == [
        ("admin_owned.n", 7),
        ("admin_visits.n", 7),
    ]


def test_two_counters_of_one_scope_in_two_forms_are_listed_apart(mongoengine_db: Any) -> None:
    # Counters named from a dict and from a SON of the same items (made before the fix) had
    # been listed as one, the higher's next value shown for both and their headroom summed.
    AdminVisit(place=AdminPlace(city="x")).save()
    set_next_value(mongoengine_db, "admin_visits.n", 50, scope={"city": "x"})  # a plain dict
    infos = list_counters(mongoengine_db)
    assert sorted((str(i.scope), i.next_value, len(i.shards)) for i in infos) == [
        ("SON([('city', 'x')])", 2, 1),
        ("{'city': 'x'}", 50, 1),
    ]


def test_the_field_names_one_counter_for_an_embedded_scope_given_as_its_stored_dict(
    mongoengine_db: Any,
) -> None:
    AdminVisit(place=AdminPlace(city="x")).save()
    stored = AdminVisit._get_collection().find_one()["place"]
    assert AdminVisit.n.get_next_value(scope=stored) == 2
    AdminVisit.n.set_next_value(9, scope=stored)  # MongoEngine's meaning: the next is 10
    assert AdminVisit(place=AdminPlace(city="x")).save().n == 10
    assert mongoengine_db[DEFAULT_COLLECTION].count_documents({}) == 1


class AdminHeld(Document):
    meta = {"collection": "admin_held"}


class AdminSpot(me_fields.EmbeddedDocument):
    owner = me_fields.GenericReferenceField()


class AdminSpotted(Document):
    spot = me_fields.EmbeddedDocumentField(AdminSpot)
    n = SequenceField(scope="spot")
    meta = {"collection": "admin_spotted"}


def test_a_generic_reference_inside_an_embedded_scope_names_one_counter(
    mongoengine_db: Any,
) -> None:
    # Review G: a new document named the counter with the reference as a SON, a loaded one
    # (and backfill()) with its stored dict: two counters, and number 1 twice in one scope.
    held = AdminHeld().save()
    AdminSpotted(spot=AdminSpot(owner=held)).save()
    collection = AdminSpotted._get_collection()
    stored = collection.find_one({}, {"_id": 0, "n": 0})
    collection.insert_one(dict(stored))  # imported without a number
    assert backfill(AdminSpotted) == 1
    collection.insert_one(dict(stored))  # another
    loaded = AdminSpotted.objects(n=None).get()
    loaded.save()  # the other: a loaded document numbered on save
    AdminSpotted(spot=AdminSpot(owner=held)).save()
    assert sorted(doc["n"] for doc in collection.find()) == [1, 2, 3, 4]
    assert mongoengine_db[DEFAULT_COLLECTION].count_documents({}) == 1


class AdminMapped(Document):
    places = me_fields.MapField(me_fields.EmbeddedDocumentField(AdminPlace))
    n = SequenceField(scope="places")
    meta = {"collection": "admin_mapped"}


class AdminAnyPlace(Document):
    place = me_fields.GenericEmbeddedDocumentField()
    n = SequenceField(scope="place")
    meta = {"collection": "admin_any_place"}


def test_a_map_of_embedded_documents_as_listed_names_its_counter(mongoengine_db: Any) -> None:
    AdminMapped(places={"k": AdminPlace(city="x")}).save()
    collection = AdminMapped._get_collection()
    stored = collection.find_one({}, {"_id": 0, "n": 0})
    for number in range(2, 6):
        collection.insert_one({**stored, "n": number})
    (info,) = list_counters(mongoengine_db)
    set_next_value(mongoengine_db, info.name, 6, scope=info.scope)
    assert AdminMapped(places={"k": AdminPlace(city="x")}).save().n == 6
    assert mongoengine_db[DEFAULT_COLLECTION].count_documents({}) == 1


def test_a_generic_embedded_scope_given_as_its_stored_dict(mongoengine_db: Any) -> None:
    AdminAnyPlace(place=AdminPlace(city="x")).save()
    stored = AdminAnyPlace._get_collection().find_one()["place"]
    assert AdminAnyPlace.n.get_next_value(scope=stored) == 2  # had raised AttributeError
    AdminAnyPlace.n.set_next_value(9, scope=stored)
    assert AdminAnyPlace(place=AdminPlace(city="x")).save().n == 10


def test_set_refuses_a_document_of_that_name_that_is_not_the_counter(mongoengine_db: Any) -> None:
    # Probe AM: a hand-edited counter (a shard's fields, an _id without "#0") was moved without
    # force=True, then the call raised LookupError: it could not find what it had written.
    counters = mongoengine_db[DEFAULT_COLLECTION]
    edited = {"_id": "bnd", "next": 5, "low": 10, "high": 20, "sequence": "bnd", "shard": 0}
    counters.insert_one(dict(edited))
    with pytest.raises(ValueError, match=r"'bnd' .* is not the counter of 'bnd'.*by hand"):
        set_next_value(mongoengine_db, "bnd", 15)
    assert list(counters.find()) == [edited]
