"""The installed distribution: dependencies, typing marker, entry points."""

from __future__ import annotations

import importlib.metadata as metadata
import re
from pathlib import Path

import mongoengine_ids

DIST = metadata.distribution("mongoengine-ids")
RUNTIME = [req for req in DIST.requires or [] if "extra ==" not in req]
OLDEST = Path(__file__).resolve().parents[1] / ".ci" / "oldest.txt"


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match is not None, requirement
    return match.group().lower()


def _release(version: str) -> tuple[int, ...]:
    """4.0 and 4.0.0 are the same release: trailing zeros dropped."""
    parts = [int(part) for part in version.split(".")]
    while parts and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def test_runtime_dependencies_are_mongoengine_and_pymongo_only() -> None:
    assert sorted(_name(req) for req in RUNTIME) == ["mongoengine", "pymongo"]


def test_ci_oldest_pins_are_the_lower_bounds() -> None:
    """.ci/run tests the versions in .ci/oldest.txt: they must be pyproject's lower bounds."""
    lower = {}
    for req in RUNTIME:
        bound = re.search(r">=\s*([0-9][0-9.]*)", req)
        assert bound is not None, f"{req}: no lower bound"
        lower[_name(req)] = _release(bound.group(1))
    pins = {}
    for line in OLDEST.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, equals, version = line.partition("==")
            assert equals, f"{OLDEST.name}: {line!r} is not an exact pin"
            pins[_name(name)] = _release(version.strip())
    assert pins == lower


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
    assert points[("console_scripts", "mongoengine-ids")] == "mongoengine_ids.tools.cli:main"
    assert points[("pytest11", "mongoengine_ids")] == "mongoengine_ids.testing"


def test_public_names_are_importable() -> None:
    for name in mongoengine_ids.__all__:
        assert getattr(mongoengine_ids, name) is not None


def test_the_admin_api_is_importable_from_mongoengine_ids_sequence() -> None:
    """sequence.md says so (probe AD: has_scoped_counters was not)."""
    from mongoengine_ids import sequence
    from mongoengine_ids.sequence import admin

    missing = [name for name in admin.__all__ if getattr(sequence, name, None) is None]
    assert missing == []
    assert set(admin.__all__) <= set(sequence.__all__)


def test_the_library_never_imports_the_command_line_tools() -> None:
    """Using the fields loads nothing of mongoengine_ids.tools (the command line)."""
    import subprocess
    import sys

    code = (
        "import sys, pkgutil, importlib, mongoengine_ids\n"
        "packages = [mongoengine_ids]\n"
        "while packages:\n"
        "    package = packages.pop()\n"
        "    for info in pkgutil.iter_modules(package.__path__, package.__name__ + '.'):\n"
        "        if info.name != 'mongoengine_ids.tools':\n"
        "            module = importlib.import_module(info.name)\n"
        "            if info.ispkg:\n"
        "                packages.append(module)\n"
        "print(sorted(m for m in sys.modules if m.startswith('mongoengine_ids.tools')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"
