"""Every Python example of README.md and docs/*.md runs, and prints what the page shows.

How a page is read (CONTRIBUTING.md says it for authors):

- Each ```python block runs, in the order of the page, in one namespace per page, in a fresh
  temporary directory (the working directory, and first on ``sys.path``). Pages connect
  MongoEngine themselves, to mongomock (``mongo_client_class=mongomock.MongoClient``), as a
  reader copying them would; every alias is disconnected after the page.
- A ```text block right after a python block (nothing but blank lines between) is what that
  block prints; it is compared with doctest's rules, ``...`` matching anything. A block followed
  by no such block must print nothing.
- A python block with ``title="NAME.py"`` is a file: written to the directory, not run by itself.
  Other blocks import it (each such module must be imported by a block or a test file). Test
  files (``test_*.py``, ``conftest.py``) are run with pytest in a subprocess after the page's
  other blocks, as a user runs them, and every test must pass (no skip, no warning).
- A block preceded by ``<!-- no-run: REASON -->`` is skipped, unless MONGOENGINE_IDS_TEST_URI
  is set: then it runs with ``mongodb://localhost:27017/app`` in its text replaced by that
  server (on a fresh database, dropped after the page).
- A ```console block holds ``$ mongoengine-ids ...`` lines, each run as the installed command
  (a subprocess), and under each what it prints (stdout and stderr, as a terminal shows them),
  compared the same way.
- Python hidden in other blocks (``>>>`` lines, ```py, ```pycon) fails the test: show it as a
  python block.
"""

from __future__ import annotations

import ast
import contextlib
import doctest
import io
import re
import shlex
import subprocess
import sys
import textwrap
import traceback
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mongoengine
import pymongo
import pytest
from _support import TEST_URI

from mongoengine_ids.resets import reset_process_state

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: In a block marked no-run, the text that stands for the server and its database.
SERVER = "mongodb://localhost:27017/app"

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
NO_RUN = re.compile(r"^<!--\s*no-run\s*(?::\s*(?P<reason>.*?))?\s*-->$")
TITLE = re.compile(r'title="(?P<title>[^"]*)"')
TEST_FILE = re.compile(r"(test_\w+|conftest)\.py")
HIDDEN_LANGUAGES = {"py", "py3", "python3", "pycon", "pyrepl", "ipython"}


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the first line of code
    language: str
    title: str | None
    code: str
    no_run: str | None = None  # the reason
    output: str | None = None  # the text block shown after it

    @property
    def where(self) -> str:
        name = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page.name
        return f"{name}:{self.line}"

    @property
    def is_test_file(self) -> bool:
        return self.title is not None and TEST_FILE.fullmatch(Path(self.title).name) is not None


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)  # the python blocks
    commands: list[Block] = field(default_factory=list)  # the console blocks
    problems: list[str] = field(default_factory=list)


def read_page(path: Path) -> Page:
    """The page's python blocks, their markers and shown output, and what is wrong with them."""
    page = Page(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    fences: list[Block] = []  # every fenced block, in order
    ends: list[int] = []  # index of each block's closing fence
    marker_of: dict[int, str | None] = {}  # index of a fenced block -> its no-run reason
    index = 0
    pending_marker: tuple[int, str | None] | None = None
    while index < len(lines):
        text = lines[index]
        marker = NO_RUN.match(text.strip())
        if marker:
            if pending_marker is not None:
                page.problems.append(f"{path.name}:{pending_marker[0] + 1}: no block follows it")
            pending_marker = (index, marker.group("reason"))
            index += 1
            continue
        opening = FENCE.match(text)
        if not opening:
            if text.strip() and pending_marker is not None:
                page.problems.append(
                    f"{path.name}:{pending_marker[0] + 1}: a no-run marker must be right before "
                    "a python block"
                )
                pending_marker = None
            index += 1
            continue
        fence, indent, info = opening["fence"], len(opening["indent"]), opening["info"]
        end = index + 1
        while end < len(lines):
            closing = FENCE.match(lines[end])
            if (
                closing
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"]
            ):
                break
            end += 1
        body = [
            line[indent:] if line[:indent].strip() == "" else line
            for line in lines[index + 1 : end]
        ]
        language = info.split()[0].lower() if info.split() else ""
        title = TITLE.search(info)
        block = Block(
            path, index + 2, language, title["title"] if title else None, "\n".join(body) + "\n"
        )
        if pending_marker is not None:
            marker_of[len(fences)] = pending_marker[1]
            if language != "python":
                page.problems.append(
                    f"{path.name}:{pending_marker[0] + 1}: a no-run marker before a "
                    f"{language or 'plain'} block"
                )
            elif not (pending_marker[1] or "").strip():
                page.problems.append(f"{path.name}:{pending_marker[0] + 1}: no-run needs a reason")
            pending_marker = None
        fences.append(block)
        ends.append(end)
        index = end + 1
    if pending_marker is not None:
        page.problems.append(f"{path.name}:{pending_marker[0] + 1}: no block follows it")

    for number, block in enumerate(fences):
        if block.language in HIDDEN_LANGUAGES or (
            block.language != "python" and re.search(r"^\s*>>> ", block.code, re.MULTILINE)
        ):
            page.problems.append(
                f"{block.where}: Python in a {block.language or 'plain'} block; make it a "
                "python block, so that it runs"
            )
        if block.language == "console":
            page.commands.append(block)
            if not re.match(r"\$ mongoengine-ids\b", block.code) or any(
                line.startswith("$ ") and not line.startswith("$ mongoengine-ids ")
                for line in block.code.splitlines()
            ):
                page.problems.append(
                    f"{block.where}: a console block runs `$ mongoengine-ids ...` lines only"
                )
        if block.language != "python":
            continue
        block.no_run = marker_of.get(number)
        if block.title is None and _defines_tests(block.code):
            page.problems.append(
                f'{block.where}: defines tests: make it a test file (title="test_NAME.py"), '
                "so that pytest runs them"
            )
        if block.title is not None and not re.fullmatch(r"[\w/]+\.py", block.title):
            page.problems.append(f"{block.where}: title={block.title!r} is not a file name")
        following = fences[number + 1] if number + 1 < len(fences) else None
        if (
            following is not None
            and following.language == "text"
            and all(not line.strip() for line in lines[ends[number] + 1 : following.line - 2])
        ):
            if block.title is not None:
                page.problems.append(f"{block.where}: a file shows no output")
            block.output = following.code
        page.blocks.append(block)
    return page


def _defines_tests(code: str) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False  # reported when the block runs
    return any(
        (isinstance(node, ast.FunctionDef) and node.name.startswith("test"))
        or (isinstance(node, ast.ClassDef) and node.name.startswith("Test"))
        for node in tree.body
    )


def server_uri(uri: str, database: str) -> str:
    """``uri`` naming ``database`` instead of its own. A user still authenticates where ``uri``
    said (its database, else admin), unless ``uri`` names an authSource itself."""
    base, _, query = uri.partition("?")
    scheme, _, rest = base.partition("://")
    hosts, _, path = rest.partition("/")
    options = [option for option in query.split("&") if option]
    if "@" in hosts and not any(o.lower().startswith("authsource=") for o in options):
        options.append(f"authSource={path or 'admin'}")
    return f"{scheme}://{hosts}/{database}" + (f"?{'&'.join(options)}" if options else "")


def _compare(block: Block, printed: str) -> None:
    shown = block.output or ""
    checker = doctest.OutputChecker()
    if checker.check_output(shown, printed, doctest.ELLIPSIS):
        return
    if block.output is None:
        pytest.fail(f"{block.where}: prints, but the page shows no output:\n{printed}")
    pytest.fail(
        f"{block.where}: the output shown differs from what it prints:\n"
        + checker.output_difference(doctest.Example("", shown), printed, doctest.ELLIPSIS)
    )


@contextlib.contextmanager
def _servers_refused(block: Block) -> Iterator[None]:
    """A block not marked no-run that makes a pymongo client fails at once (not after pymongo's
    30 s), and never writes to a server that happens to run on the machine."""
    if block.no_run is not None:
        yield
        return

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(
            f"{block.where}: connects to a server; connect to mongomock "
            "(mongo_client_class=mongomock.MongoClient), or mark the block no-run with a reason"
        )

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pymongo, "MongoClient", refuse)
        patch.setattr(mongoengine.connection, "MongoClient", refuse)
        yield


def _command_line() -> list[str]:
    beside = Path(sys.executable).parent / "mongoengine-ids"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "mongoengine_ids.tools.cli"]


def run_commands(block: Block, directory: Path) -> int:
    """Run each ``$ mongoengine-ids ...`` line of a console block and compare what it prints
    (stdout and stderr, as a terminal shows them) with the lines under it."""
    commands: list[tuple[str, list[str]]] = []
    for line in block.code.splitlines():
        if line.startswith("$ "):
            commands.append((line[2:], []))
        elif commands:
            commands[-1][1].append(line)
    checker = doctest.OutputChecker()
    for command, shown in commands:
        result = subprocess.run(
            [*_command_line(), *shlex.split(command)[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=directory,
            timeout=300,
            check=False,
        )
        want = "\n".join(shown).strip("\n") + "\n"
        got = result.stdout.strip("\n") + "\n"
        if not checker.check_output(want, got, doctest.ELLIPSIS):
            pytest.fail(
                f"{block.where}: `{command}` prints otherwise:\n"
                + checker.output_difference(doctest.Example("", want), got, doctest.ELLIPSIS)
            )
    return len(commands)


def _disconnect_everything() -> None:
    for alias in list(mongoengine.connection._connection_settings):
        mongoengine.disconnect(alias)
    stack = list(mongoengine.Document.__subclasses__())
    while stack:
        model = stack.pop()
        stack.extend(model.__subclasses__())
        model._collection = None
    reset_process_state()


def drop_database(uri: str, database: str) -> None:
    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000) as client:
        client.drop_database(database)


def run_page(
    page: Page, directory: Path, pytester: pytest.Pytester | None, uri: str | None = TEST_URI
) -> dict[str, int]:
    """Run the page's python blocks (and its no-run blocks on the server ``uri``, if given);
    return how many ran, and how many were skipped."""
    counts = {"ran": 0, "skipped": 0, "tests": 0, "commands": 0}
    namespace: dict[str, Any] = {"__name__": f"docs_{page.path.stem.replace('-', '_')}"}
    database = f"mongoengine_ids_docs_{uuid.uuid4().hex[:12]}"
    files: list[Block] = []
    tests: list[Block] = []
    sys.path.insert(0, str(directory))
    try:
        for block in page.blocks:
            code = block.code
            if block.no_run is not None:
                if uri is None:
                    counts["skipped"] += 1
                    continue
                code = code.replace(SERVER, server_uri(uri, database))
            if block.title is not None:
                target = directory / block.title
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(code, encoding="utf-8")
                (tests if block.is_test_file else files).append(block)
                continue
            printed = io.StringIO()
            # Blank lines first, so that a traceback's line numbers are the page's.
            source = "\n" * (block.line - 1) + code
            try:
                with contextlib.redirect_stdout(printed), _servers_refused(block):
                    exec(compile(source, str(block.page), "exec"), namespace)
            except Exception:
                pytest.fail(f"{block.where}: the example fails\n{traceback.format_exc()}")
            counts["ran"] += 1
            _compare(block, printed.getvalue())
        _disconnect_everything()
        for block in page.commands:
            counts["commands"] += run_commands(block, directory)
        for block in files:
            module = block.title.removesuffix(".py").replace("/", ".")  # type: ignore[union-attr]
            imported = module in sys.modules or any(
                re.search(rf"^\s*(from|import)\s+{re.escape(module)}\b", test.code, re.MULTILINE)
                for test in tests
            )
            assert imported, f"{block.where}: {block.title} is never imported"
            counts["ran"] += 1
        if tests:
            assert pytester is not None
            result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
            outcomes = result.parseoutcomes()
            report = "\n".join(result.outlines)
            assert result.ret == 0, f"{page.path.name}: its test files fail:\n{report}"
            assert set(outcomes) == {"passed"}, f"{page.path.name}: not clean: {outcomes}\n{report}"
            counts["ran"] += len(tests)
            counts["tests"] += outcomes["passed"]
    finally:
        sys.path.remove(str(directory))
        for name, module in list(sys.modules.items()):
            if str(directory) in str(getattr(module, "__file__", None) or ""):
                del sys.modules[name]
        if uri is not None:
            drop_database(uri, database)
        _disconnect_everything()
    return counts


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_examples(path: Path, pytester: pytest.Pytester) -> None:
    page = read_page(path)
    assert not page.problems, "\n".join(page.problems)
    counts = run_page(page, pytester.path, pytester)
    assert counts["ran"] + counts["skipped"] == len(page.blocks)
    print(f"{path.relative_to(ROOT)}: {counts}")  # pytest -rP shows how many ran


# -- the reader itself ------------------------------------------------------------------------


def _page(tmp_path: Path, text: str) -> Page:
    path = tmp_path / "page.md"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return read_page(path)


def test_reader_finds_blocks_markers_and_output(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        """\
        # A page

        ```python
        print("one")
        ```

        ```text
        one
        ```

        <!-- no-run: needs a server -->
        ```python
        x = 1
        ```

        1. In a list:

           ```python title="models.py"
           y = 2
           ```

        ```sh
        echo not python
        ```
        """,
    )
    assert page.problems == []
    assert [(b.line, b.no_run, b.output, b.title) for b in page.blocks] == [
        (4, None, "one\n", None),
        (13, "needs a server", None, None),
        (19, None, None, "models.py"),
    ]
    assert page.blocks[2].code == "y = 2\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("```pycon\n>>> 1\n1\n```\n", "Python in a pycon block"),
        ("```text\n>>> import x\n```\n", "Python in a text block"),
        ("<!-- no-run -->\n```python\nx = 1\n```\n", "no-run needs a reason"),
        ("<!-- no-run: why -->\n```sh\nls\n```\n", "a no-run marker before a sh block"),
        ("<!-- no-run: why -->\nText.\n```python\nx = 1\n```\n", "must be right before"),
        ("Text.\n<!-- no-run: why -->\n", "no block follows it"),
        ("```console\n$ rm -rf /\n```\n", "a console block runs `$ mongoengine-ids ...` lines"),
    ],
)
def test_reader_refuses_hidden_or_unexplained_examples(
    tmp_path: Path, text: str, problem: str
) -> None:
    assert problem in "\n".join(_page(tmp_path, text).problems)


def test_a_wrong_output_fails(tmp_path: Path) -> None:
    page = _page(tmp_path, '```python\nprint("two")\n```\n\n```text\none\n```\n')
    with pytest.raises(pytest.fail.Exception, match="differs"):
        run_page(page, tmp_path, None)
    page = _page(tmp_path, '```python\nprint("two")\n```\n')
    with pytest.raises(pytest.fail.Exception, match="shows no output"):
        run_page(page, tmp_path, None)
    page = _page(tmp_path, '```python\nprint("a 1 b")\n```\n\n```text\na ... b\n```\n')
    assert run_page(page, tmp_path, None)["ran"] == 1


def test_a_failing_example_names_its_line(tmp_path: Path) -> None:
    page = _page(tmp_path, "Text.\n\n```python\nx = 1\nundefined_name\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"page.md:4: the example fails"):
        run_page(page, tmp_path, None)


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("mongodb://localhost:27017/", "mongodb://localhost:27017/docs"),
        ("mongodb://h1,h2/?replicaSet=rs", "mongodb://h1,h2/docs?replicaSet=rs"),
        ("mongodb://u:p@h/shop", "mongodb://u:p@h/docs?authSource=shop"),
        ("mongodb://u:p@h", "mongodb://u:p@h/docs?authSource=admin"),
        (
            "mongodb+srv://u:p@h/x?authSource=y&tls=true",
            "mongodb+srv://u:p@h/docs?authSource=y&tls=true",
        ),
    ],
)
def test_server_blocks_get_a_database_of_their_own(uri: str, expected: str) -> None:
    assert server_uri(uri, "docs") == expected


def test_console_blocks_run_the_command(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "```console\n$ mongoengine-ids inspect 507f1f77bcf86cd799439011\n...\n"
        "  timestamp    2012-10-17T21:13:27Z\n...\n```\n",
    )
    assert page.problems == []
    assert run_page(page, tmp_path, None)["commands"] == 1
    page = _page(tmp_path, "```console\n$ mongoengine-ids --version\nmongoengine-ids 9.9\n```\n")
    with pytest.raises(pytest.fail.Exception, match="prints otherwise"):
        run_page(page, tmp_path, None)


def test_no_run_blocks_run_on_the_server_when_one_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (
        '<!-- no-run: needs a server -->\n```python\nprint("mongodb://localhost:27017/app")\n```\n'
        "\n```text\nmongodb://u:p@h:27017/mongoengine_ids_docs_...?authSource=shop\n```\n"
    )
    assert run_page(_page(tmp_path, text), tmp_path, None, uri=None) == {
        "ran": 0,
        "skipped": 1,
        "tests": 0,
        "commands": 0,
    }
    dropped: list[tuple[str, str]] = []
    monkeypatch.setattr(sys.modules[__name__], "drop_database", lambda *a: dropped.append(a))
    counts = run_page(_page(tmp_path, text), tmp_path, None, uri="mongodb://u:p@h:27017/shop")
    assert counts["ran"] == 1
    assert [uri for uri, _ in dropped] == ["mongodb://u:p@h:27017/shop"]
