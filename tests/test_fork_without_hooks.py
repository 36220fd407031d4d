"""A fork that skips Python's at-fork hooks: every child still makes ids of its own.

uWSGI's default prefork calls the C library's ``fork()`` and never Python's at-fork hooks
(without ``--py-call-osafterfork``, unbit/uwsgi#1978); so does a C extension that forks. The
workers kept their parent's state: the same Locality pid and counter, the same leased block, the
same unread random words, and so made the same ids. Here the C ``fork()`` is called through
:mod:`ctypes` (``PyDLL``: the GIL stays held, as in uWSGI's master); the children send what they
made through a pipe, and the sets are compared exactly.

Only this process's and its children's memory is involved: each child uses its own in-memory
copy of a mongomock database (a server's client would be the parent's, its sockets shared), so
a sequence's children are checked against the block they inherited, not against each other.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import ctypes
import json
import operator
import os
import pathlib
import pickle
import re
import select
import threading
import time
from collections.abc import Callable
from typing import Any

import mongoengine as me
import mongomock
import pytest
from _support import in_forked_child, run_threads

from mongoengine_ids import (
    LocalityUUIDField,
    LocalityUUIDGenerator,
    RandomUniqueField,
    SequenceField,
    resets,
)
from mongoengine_ids.locality.generator import LocalityUUID
from mongoengine_ids.random_unique.space import SYSTEM_RANDOMNESS, SystemRandomness
from mongoengine_ids.sequence import Sequence
from mongoengine_ids.sequence import field as sequence_module
from mongoengine_ids.standard import UUID7Generator
from mongoengine_ids.testing import connected

#: One millisecond for every id: a counter two children inherited repeats their ids for sure.
T = 1350327498450
#: Ids, values or words per child.
PER_CHILD = 1000


def _c_fork() -> Callable[[], int] | None:
    """The C library's ``fork()``, which runs none of Python's at-fork hooks; None without."""
    if not hasattr(os, "fork"):
        return None
    try:
        fork: Callable[[], int] = ctypes.PyDLL(None).fork
    except (AttributeError, OSError, TypeError):  # no such symbol, no C library, Windows
        return None
    return fork


C_FORK = _c_fork()
needs_c_fork = pytest.mark.skipif(C_FORK is None, reason="needs the C library's fork()")


def _children(count: int, work: Callable[[], Any], *, timeout: float = 20.0) -> list[Any]:
    """Fork ``count`` children with the C ``fork()``, all from the same state (this process
    changes nothing between the forks); each runs ``work`` and sends back its result as JSON,
    with its ``os.getpid()``. Returns ``{"pid": ..., "result": ...}`` per child, in order; a
    child that fails reports ``{"error": ...}``, one that does not answer in time ``"HUNG"``."""
    assert C_FORK is not None
    forked: list[tuple[int, int]] = []
    for _ in range(count):
        read_end, write_end = os.pipe()
        pid = C_FORK()
        if pid == 0:  # pragma: no cover - the child
            try:
                os.close(read_end)
                try:
                    reply = {"pid": os.getpid(), "result": work()}
                except BaseException as error:  # the parent reports it
                    reply = {"error": f"{type(error).__name__}: {error}"}
                data = json.dumps(reply).encode()
                while data:
                    data = data[os.write(write_end, data) :]
            finally:
                os._exit(0)
        assert pid > 0, "fork() failed"
        os.close(write_end)
        forked.append((pid, read_end))
    replies: list[Any] = []
    deadline = time.monotonic() + timeout
    for pid, read_end in forked:
        data = b""
        while True:
            ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(read_end, 1 << 16) if ready else None
            if not chunk:
                break
            data += chunk
        os.close(read_end)
        if chunk is None:  # timed out
            os.kill(pid, 9)
            replies.append("HUNG")
        else:
            replies.append(json.loads(data))
        os.waitpid(pid, 0)
    return replies


def _results(replies: list[Any]) -> list[tuple[int, Any]]:
    """``(pid, result)`` of each child, after checking that every child answered."""
    for reply in replies:
        assert reply != "HUNG", "a child hung (a lock held at fork time?)"
        assert "error" not in reply, f"a child failed: {reply['error']}"
    return [(reply["pid"], reply["result"]) for reply in replies]


# -- LocalityUUIDGenerator ----------------------------------------------------------------------


@needs_c_fork
@pytest.mark.parametrize(
    "first",
    [
        "generate",  # the hot path's inline check
        "generate_many",  # a bulk insert's
        "generate_str",  # through generate()
        "pid",  # reading the pid: already the child's, before any id
        "use_sequential",  # a mode switch: the lock, then the counter
    ],
)
def test_locality_siblings_forked_without_hooks_make_ids_of_their_own(first: str) -> None:
    generator = LocalityUUIDGenerator(clock=lambda: T, pid=4242)
    before = generator.generate()

    def work() -> list[str]:
        made: list[LocalityUUID] = []
        if first == "generate_many":
            made += generator.generate_many(10)
        elif first == "generate_str":
            made.append(LocalityUUID(generator.generate_str()))
        elif first == "pid":
            assert generator.pid == os.getpid() % 65536
        elif first == "use_sequential":
            generator.use_sequential()
        made += [generator.generate() for _ in range(PER_CHILD - len(made))]
        return [str(value) for value in made]

    children = _results(_children(3, work))
    after = [generator.generate() for _ in range(PER_CHILD)]
    made = [before, *after]
    for pid, ids in children:
        values = [LocalityUUID(text) for text in ids]
        assert len(values) == PER_CHILD
        assert {value.pid for value in values} == {pid % 65536}  # its own, not 4242
        made += values
    assert len(set(made)) == len(made) == (3 + 1) * PER_CHILD + 1
    assert {value.pid for value in [before, *after]} == {4242}  # the parent is not affected
    assert generator.mode == "spread"


@needs_c_fork
def test_threads_of_a_child_forked_without_hooks_reset_its_state_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight threads of the child ask for ids at the same moment: one makes the state the
    child's, the others wait for it (none makes an id from the parent's state)."""
    generator = LocalityUUIDGenerator(clock=lambda: T)
    parent_ids = [generator.generate() for _ in range(PER_CHILD)]
    runs: list[int] = []

    def counted() -> None:
        time.sleep(0.05)  # the other threads arrive meanwhile
        runs.append(os.getpid())

    monkeypatch.setattr(resets, "_fork_callbacks", [*resets._fork_callbacks, counted])

    def work() -> dict[str, Any]:
        made = run_threads(8, lambda _: [str(generator.generate()) for _ in range(200)])
        words = run_threads(8, lambda _: [SYSTEM_RANDOMNESS.randbelow(2**64) for _ in range(50)])
        return {"runs": runs, "ids": [text for ids in made for text in ids], "words": words}

    [(pid, result)] = _results(_children(1, work))
    assert result["runs"] == [pid]  # once, in the child
    values = {LocalityUUID(text) for text in result["ids"]}
    assert len(values) == 8 * 200
    assert {value.pid for value in values} == {pid % 65536}
    assert values.isdisjoint(parent_ids)
    words = [word for thread in result["words"] for word in thread]
    assert len(set(words)) == len(words) == 8 * 50
    assert runs == []  # not in the parent


# -- Sequence and SequenceField -----------------------------------------------------------------


@needs_c_fork
@pytest.mark.parametrize(
    "first",
    [
        "next",  # a save()'s
        "next_values",  # a bulk insert's
        "peek",  # the preview: not a value of the parent's block either
    ],
)
def test_sequence_children_forked_without_hooks_drop_the_inherited_block(first: str) -> None:
    sequence = Sequence(
        "forked", database=mongomock.MongoClient().db, batch_size=100, write_concern=None
    )
    assert sequence.next() == 1  # the parent holds 2..100 now; the counter says 100

    def work() -> list[int]:
        values: list[int] = []
        if first == "next_values":
            values += sequence.next_values(5)
        elif first == "peek":
            values.append(sequence.peek())
        return values + [sequence.next() for _ in range(5)]

    children = _results(_children(2, work))
    for _pid, values in children:
        # Each leased its own block from its copy of the counter (on a server, one after the
        # other's): never a value of the block it inherited.
        assert values[0] == 101
        assert not set(values) & set(range(2, 101))
    assert [sequence.next() for _ in range(3)] == [2, 3, 4]  # the parent keeps its block


class ForkPlace(me.Document):
    id = LocalityUUIDField(primary_key=True, generator=LocalityUUIDGenerator(clock=lambda: T))
    meta = {"collection": "fork_places", "db_alias": "fork"}


class ForkOrder(me.Document):
    id = SequenceField(primary_key=True, batch_size=100)
    meta = {"collection": "fork_orders", "db_alias": "fork"}


class ForkTicket(me.Document):
    code = RandomUniqueField(digits=12)
    meta = {"collection": "fork_tickets", "db_alias": "fork"}


@needs_c_fork
def test_models_saved_by_workers_forked_without_hooks_store_values_of_their_own() -> None:
    """The finding's scenario: the master saves once, two workers save after a C fork; the raw
    documents each worker stored (in its copy of mongomock)."""
    with connected() as connect:
        connect(alias="fork")
        for model in (ForkPlace, ForkOrder, ForkTicket):
            model().save()
        master = {
            "places": [ForkPlace.objects.get().id],
            "tickets": [ForkTicket.objects.get().code],
        }

        def work() -> dict[str, list[Any]]:
            for _ in range(20):
                ForkPlace().save()
            ForkOrder.objects.insert([ForkOrder() for _ in range(3)], load_bulk=False)
            ForkOrder().save()
            for _ in range(5):
                ForkTicket().save()
            raw = {
                model: list(model._get_collection().find())
                for model in (ForkPlace, ForkOrder, ForkTicket)
            }
            return {
                "places": [str(document["_id"].as_uuid()) for document in raw[ForkPlace]],
                "orders": [document["_id"] for document in raw[ForkOrder]],
                "tickets": [document["code"] for document in raw[ForkTicket]],
            }

        children = _results(_children(2, work))
    places = [str(value) for value in master["places"]]
    tickets = list(master["tickets"])
    for pid, stored in children:
        made = [LocalityUUID(text) for text in stored["places"] if text not in places[:1]]
        assert len(made) == 20
        assert {value.pid for value in made} == {pid % 65536}
        places += [str(value) for value in made]
        # The master's 1, then a block of the worker's own (2..100 was the master's).
        assert sorted(stored["orders"]) == [1, 101, 102, 103, 104]
        tickets += [code for code in stored["tickets"] if code != master["tickets"][0]]
    assert len(set(places)) == len(places) == 1 + 2 * 20
    assert len(set(tickets)) == len(tickets) == 1 + 2 * 5


# -- the random pool ----------------------------------------------------------------------------


@needs_c_fork
def test_random_children_forked_without_hooks_do_not_replay_the_parents_words() -> None:
    own = SystemRandomness()  # not only the default one
    for randomness in (SYSTEM_RANDOMNESS, own):
        randomness.randbelow(2**64)  # the parent holds 511 unread words of each now

    def work() -> list[int]:
        return [r.randbelow(2**64) for r in (SYSTEM_RANDOMNESS, own) for _ in range(16)]

    children = _results(_children(2, work))
    words = [r.randbelow(2**64) for r in (SYSTEM_RANDOMNESS, own) for _ in range(16)]
    for _pid, drawn in children:
        assert len(drawn) == 32
        words += drawn
    assert len(set(words)) == len(words) == 3 * 32


@needs_c_fork
def test_write_owners_of_children_forked_without_hooks_are_their_own() -> None:
    """Whom a value is for (a ``reserve_in`` reservation's ``by``) names the process: siblings
    forked without the hooks named the parent, the same owner each, and could take each
    other's reservation for their own (found by the fix of probe BG)."""
    from mongoengine_ids.write.values import new_owner

    parents = [new_owner() for _ in range(4)]
    children = _results(_children(2, lambda: [new_owner() for _ in range(4)]))
    owners = parents + [owner for _pid, made in children for owner in made]
    assert len(set(owners)) == len(owners) == 12
    processes = {owner.rpartition("-")[0] for owner in owners}
    assert len(processes) == 3


# -- locks held at fork time --------------------------------------------------------------------


def _one_child_holding(held: list[Any], work: Callable[[], Any]) -> list[tuple[int, Any]]:
    """:func:`_results` of one child forked while this process holds the locks ``held`` (as
    other threads would at the moment of the fork), given 5 s to answer."""
    with contextlib.ExitStack() as stack:
        for lock in held:
            stack.enter_context(lock)
        replies = _children(1, work, timeout=5.0)
    return _results(replies)


@needs_c_fork
def test_a_child_forked_without_hooks_does_not_wait_for_locks_held_at_fork_time() -> None:
    """Other threads of the parent were making ids and leasing at the moment of the fork: the
    child, which does not have those threads, replaces their locks instead of waiting."""
    generator = LocalityUUIDGenerator(clock=lambda: T)
    sequence = Sequence("held", database=mongomock.MongoClient().db, write_concern=None)
    sequence.next()
    held = [
        generator._lock,
        sequence._lock,
        sequence_module._live_lock,
        sequence_module._leased_lock,
        sequence_module._leased_to._lock,
    ]

    def work() -> list[Any]:
        return [str(generator.generate()), sequence.next(), Sequence("new", database="x").name]

    [(pid, (made, value, name))] = _one_child_holding(held, work)
    assert LocalityUUID(made).pid == pid % 65536
    assert value == 2  # its copy of the counter: its own block after the parent's one value
    assert name == "new"


@needs_c_fork
def test_field_locks_held_at_fork_time_are_not_waited_for_either() -> None:
    """Review Q: a new LocalityUUIDField's generator, a UUID7 generator and the claims of a
    RandomUniqueField drawing from a user's rng took locks of the parent unchecked: the child
    hung on one a parent thread held."""
    from mongoengine_ids import UUID7Generator
    from mongoengine_ids.locality import field as locality_field
    from mongoengine_ids.random_unique import field as random_field

    field = LocalityUUIDField()
    uuid7 = UUID7Generator(clock=lambda: T)
    uuid7.generate()
    random_field._CLAIMS.claim(("x", "y", "z"), 1, field)  # a claims table in use

    def work() -> list[Any]:
        claimed = random_field._CLAIMS.claim(("x", "y", "z"), 2, uuid7)
        return [str(field.generator.generate()), str(uuid7.generate()), claimed]

    held = [locality_field._generator_lock, uuid7._lock, random_field._CLAIMS._lock]
    [(pid, (made, _uuid7, claimed))] = _one_child_holding(held, work)
    assert LocalityUUID(made).pid == pid % 65536
    assert claimed is True


@needs_c_fork
def test_a_worker_forked_while_every_lock_of_the_package_is_held_saves_all_the_same() -> None:
    """Every lock of the package is a :class:`resets.ProcessLock`, made anew in a child: a
    worker forked while other threads of the master held all of them at once (the child does
    not have those threads) saves documents of every kind, and waits for none."""
    with connected() as connect:
        connect(alias="fork")
        for model in (ForkPlace, ForkOrder, ForkTicket):
            model().save()
        master = ForkPlace.objects.get().id

        def work() -> dict[str, list[Any]]:
            ForkPlace().save()
            ForkOrder.objects.insert([ForkOrder() for _ in range(3)], load_bulk=False)
            ForkTicket().save()
            raw = {model: model._get_collection().find() for model in (ForkPlace, ForkOrder)}
            return {
                "places": [str(document["_id"].as_uuid()) for document in raw[ForkPlace]],
                "orders": [document["_id"] for document in raw[ForkOrder]],
                "tickets": ForkTicket._get_collection().count_documents({}),
            }

        held = resets._live_locks()
        assert len(held) > 10  # the package's own: caches, sequences, generators, claims
        [(pid, stored)] = _one_child_holding(held, work)
    [made] = [LocalityUUID(text) for text in stored["places"] if text != str(master)]
    assert made.pid == pid % 65536
    assert sorted(stored["orders"]) == [1, 101, 102, 103]
    assert stored["tickets"] == 2


def _called_name(func: ast.expr) -> str | None:
    """The name a call calls: ``Lock`` of ``threading.Lock()`` and of ``Lock()``."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def test_the_library_makes_its_locks_as_process_locks() -> None:
    """A plain ``threading.Lock`` of the library would stay held in a child forked while
    another thread held it, and guard state left the parent's (review Q found three): every
    lock is a :class:`resets.ProcessLock` (``resets`` itself and the tools are not the
    library's per-process state)."""
    package = pathlib.Path(resets.__file__).parent
    plain = []
    for path in sorted(package.rglob("*.py")):
        if path.name in ("resets.py", "instrumented.py") or "tools" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and _called_name(node.func) in ("Lock", "RLock"):
                plain.append(f"{path.relative_to(package)}:{node.lineno}")
    assert plain == []


@needs_c_fork
def test_uuid7_children_forked_without_hooks_reseed_their_counter() -> None:
    """Review Q: the children went on from the parent's counter in its millisecond, their ids
    told apart by their 32 random bits alone."""
    from mongoengine_ids import UUID7Generator

    generator = UUID7Generator(clock=lambda: T)
    last = generator.generate().int

    def work() -> list[int]:
        return [made.int >> 32 for made in generator.generate_many(3)]

    children = _results(_children(2, work))
    inherited = {(last >> 32) + step for step in (1, 2, 3)}
    for _pid, made in children:
        assert not inherited & set(made)
    assert not set(children[0][1]) & set(children[1][1])


# -- the check itself (in this process: no state is reset here) --------------------------------


def test_threads_noticing_another_process_together_run_the_callbacks_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    done: list[int] = []

    def slow() -> None:
        time.sleep(0.05)
        done.append(threading.get_ident())

    monkeypatch.setattr(resets, "_fork_callbacks", [slow])
    monkeypatch.setattr(resets, "owner_pid", -1)  # the state is another process's

    def work(_: int) -> list[int]:
        resets.check_process()
        return [len(done)]

    seen = run_threads(8, work)
    assert len(done) == 1
    assert seen == [[1]] * 8  # none went on before the state was this process's
    assert resets.owner_pid == os.getpid()


def test_a_failing_callback_leaves_the_state_another_processs_until_a_check_succeeds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    broken = [True]

    def flaky() -> None:
        calls.append("flaky")
        if broken[0]:
            raise RuntimeError("not ready")

    monkeypatch.setattr(resets, "_fork_callbacks", [flaky, lambda: calls.append("other")])
    monkeypatch.setattr(resets, "owner_pid", -1)
    with pytest.raises(RuntimeError, match="not ready"):
        resets.check_process()
    assert calls == ["flaky", "other"]  # the error did not stop the others
    assert resets.owner_pid == -1  # so the next check runs them again
    broken[0] = False
    resets.check_process()
    resets.check_process()
    assert calls == ["flaky", "other", "flaky", "other"]
    assert resets.owner_pid == os.getpid()


def test_callbacks_may_take_process_locks_which_are_new_and_free_by_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A callback (dropping a sequence's blocks, say) may enter a :class:`resets.ProcessLock`:
    its check does not wait for the reset it is part of, and the lock, held by a thread of the
    parent, is a new one."""
    lock = resets.ProcessLock()
    entered: list[bool] = []

    def takes_the_lock() -> None:
        with lock:
            entered.append(True)

    monkeypatch.setattr(resets, "_fork_callbacks", [takes_the_lock])
    monkeypatch.setattr(resets, "owner_pid", -1)  # the state is another process's
    old = lock.lock
    old.acquire()  # as a thread of the parent held it at fork time
    try:
        checking = threading.Thread(target=resets.check_process, daemon=True)
        checking.start()
        checking.join(5.0)
        assert not checking.is_alive(), "the check waits for a lock"
    finally:
        old.release()
    assert entered == [True]
    assert lock.lock is not old
    assert resets.owner_pid == os.getpid()


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy, pickle.dumps])
def test_a_process_lock_cannot_be_copied(copier: Callable[[Any], Any]) -> None:
    """As a ``threading.Lock`` cannot (review R): a copy, sharing the lock inside or holding
    its own, would not be made anew in a child."""
    with pytest.raises(TypeError, match="cannot copy or pickle a ProcessLock"):
        copier(resets.ProcessLock())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_child_of_os_fork_is_reset_once_by_the_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[int] = []
    counted = [*resets._fork_callbacks, lambda: runs.append(os.getpid())]
    monkeypatch.setattr(resets, "_fork_callbacks", counted)
    generator = LocalityUUIDGenerator(clock=lambda: T)

    def child() -> list[int]:
        owner = resets.owner_pid  # the hook's work, before any id
        return [owner, len(runs), generator.generate().pid]

    pid, (owner, count, made_pid) = in_forked_child(child)
    assert owner == pid
    assert count == 1  # by the hook; the generate() after it found nothing to do
    assert made_pid == pid % 65536


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_child_of_os_fork_given_the_recorded_pid_again_is_reset_all_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Probe 40c: the state is recorded as a process's by its pid, which the system gives
    again once that process is dead: a process forked without the hooks that never made the
    state its own, then forked by ``os.fork()`` a child given the dead ancestor's pid. The hook
    took the state for the child's own and reset nothing: the child handed out the ancestor's
    leased block again (2, 3, 4...). Here every process has one pid (``resets._getpid``), as
    such a child has its ancestor's. A fork the hook sees is a fork: the state is reset."""
    monkeypatch.setattr(resets, "_getpid", lambda: 4242)
    monkeypatch.setattr(resets, "owner_pid", 4242)
    sequence = Sequence(
        "reused_pid", database=mongomock.MongoClient().db, batch_size=100, write_concern=None
    )
    assert sequence.next() == 1  # the parent holds 2..100 now; the counter says 100
    _, child = in_forked_child(lambda: [sequence.next() for _ in range(3)])
    assert child == [101, 102, 103]  # a block of its own, from its copy of the counter
    assert [sequence.next() for _ in range(3)] == [2, 3, 4]  # the parent keeps its block


@needs_c_fork
def test_a_generator_made_in_a_child_forked_without_hooks_keeps_its_settings() -> None:
    """Probe 40c: made in such a child before anything of the package ran there, a generator
    was reset with the ones inherited at the child's first check, its ``pid=`` and ``counter=``
    replaced by the child's pid and a random counter (after ``os.fork()`` they were kept). It
    is made once the state is the child's own: only what was inherited is reset."""
    parent = LocalityUUIDGenerator(clock=lambda: T)
    parent.generate()

    def made() -> str:
        return str(LocalityUUIDGenerator(pid=4242, counter=0, clock=lambda: T).generate())

    def work() -> list[Any]:
        return [made(), parent.generate().pid]

    (child_pid, (child_made, inherited_pid)), *_ = _results(_children(1, work))
    assert child_made == made()  # as made here: its pid and counter kept
    assert inherited_pid == child_pid % 65536  # the inherited one is reset, as before


# -- copies of a generator (BG-3) ---------------------------------------------------------------


GENERATORS = {
    # (make one, what the refusal says a copy would do, how a later id compares to the first)
    "locality": (
        lambda: LocalityUUIDGenerator(clock=lambda: T),
        "would repeat its ids",
        operator.ne,
    ),
    # probe BR-1: copy.copy() shared its lock and went on from its millisecond and counter
    "uuid7": (
        lambda: UUID7Generator(clock=lambda: T),
        "would go on from its millisecond and counter",
        operator.gt,
    ),
}


@pytest.mark.parametrize("kind", GENERATORS)
@pytest.mark.parametrize(
    ("how", "copier"),
    [
        ("copy.copy()", copy.copy),  # was a silent clone: the same counter, the same ids
        ("copy.deepcopy()", copy.deepcopy),  # refused before, as "cannot pickle '_thread.lock'"
        ("pickle", pickle.dumps),  # the same
    ],
)
def test_a_generator_cannot_be_copied(how: str, copier: Callable[[Any], Any], kind: str) -> None:
    make, says, after = GENERATORS[kind]
    generator = make()
    first = generator.generate()
    with pytest.raises(TypeError, match=re.escape(f"cannot be copied ({how})")) as caught:
        copier(generator)
    assert says in str(caught.value)
    assert after(generator.generate(), first)  # the original carries on


@pytest.mark.parametrize(
    ("how", "copier"),
    [("copy.copy()", copy.copy), ("copy.deepcopy()", copy.deepcopy), ("pickle", pickle.dumps)],
)
def test_a_sequence_cannot_be_copied(how: str, copier: Callable[[Any], Any]) -> None:
    """The probe of session 39: copy.copy() of a Sequence was allowed, outside the fork reset;
    in a forked child the copy went on from the parent's leased block (2, 3, 4...), which the
    parent handed out too. deepcopy and pickle failed on a lock of the client, saying nothing."""
    sequence = Sequence("copied", database=mongomock.MongoClient().db, batch_size=100)
    assert sequence.next() == 1
    with pytest.raises(TypeError, match=re.escape(f"a Sequence cannot be copied ({how})")) as e:
        copier(sequence)
    assert "where the original hands them out too" in str(e.value)
    assert [sequence.next(), sequence.next()] == [2, 3]  # the original carries on
