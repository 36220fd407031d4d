"""The user-facing pytest plugin, run the way a user's own suite runs it."""

from __future__ import annotations

import sys

import pytest

USER_TESTS = """
import mongoengine as me
from bson.binary import Binary
from mongoengine_ids import LocalityUUIDField


class Place(me.Document):
    id = LocalityUUIDField(primary_key=True)
    name = me.StringField()


class Archived(me.Document):
    meta = {"db_alias": "archive"}
    id = LocalityUUIDField(primary_key=True)


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
    result.assert_outcomes(passed=6)


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
