"""The installed distribution: dependencies, typing marker, entry points."""

from __future__ import annotations

import importlib.metadata as metadata
from pathlib import Path

import mongoengine_ids

DIST = metadata.distribution("mongoengine-ids")


def test_runtime_dependencies_are_mongoengine_and_pymongo_only() -> None:
    runtime = [req for req in DIST.requires or [] if "extra ==" not in req]
    assert sorted(req.split(">")[0].split("=")[0].strip() for req in runtime) == [
        "mongoengine",
        "pymongo",
    ]


def test_extras_for_tests_and_the_demo() -> None:
    extras = set(DIST.metadata.get_all("Provides-Extra") or [])
    assert {"test", "demo"} <= extras
    requires = [req.replace('"', "'") for req in DIST.requires or []]
    assert any(req.startswith("mongomock") and "extra == 'demo'" in req for req in requires)
    for package in ("pytest", "mongomock", "hypothesis"):
        assert any(req.startswith(package) and "extra == 'test'" in req for req in requires)


def test_python_and_version() -> None:
    assert DIST.metadata["Requires-Python"] == ">=3.10"
    assert DIST.version == mongoengine_ids.__version__


def test_typed_package() -> None:
    assert (Path(mongoengine_ids.__file__).parent / "py.typed").is_file()


def test_entry_points() -> None:
    points = {(point.group, point.name): point.value for point in DIST.entry_points}
    assert points[("console_scripts", "mongoengine-ids")] == "mongoengine_ids.cli:main"
    assert points[("pytest11", "mongoengine_ids")] == "mongoengine_ids.testing"


def test_public_names_are_importable() -> None:
    for name in mongoengine_ids.__all__:
        assert getattr(mongoengine_ids, name) is not None
