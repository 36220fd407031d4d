"""LocalityUUID and LocalityUUIDGenerator: the spec's vectors, round trips, uniqueness."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import os
import pickle
import re
import threading
import uuid

import pytest
from bson.binary import Binary
from hypothesis import given
from hypothesis import strategies as st

from mongoengine_ids import InvalidIdError, LocalityUUID, LocalityUUIDGenerator
from mongoengine_ids.constants import SPREAD_STEP
from mongoengine_ids.errors import IdSpaceExhaustedError
from mongoengine_ids.locality.generator import parse_mac, reverse_hex_digits, sequential_start

# The spec's inputs: pid 12618, MAC 12:34:5d:53:7a:50, 2012-10-15T18:58:18.450Z.
PID = 12618
MAC = 0x12345D537A50
T = 1350327498450


def generator_for(
    counter_used: int, mode: str = "spread", **overrides: object
) -> LocalityUUIDGenerator:
    """A generator whose next id uses ``counter_used`` (its state is counter_used - step)."""
    step = SPREAD_STEP if mode == "spread" else 1
    options: dict[str, object] = {"pid": PID, "mac": MAC, "clock": lambda: T}
    options.update(overrides)
    return LocalityUUIDGenerator(counter=(counter_used - step) % 2**32, mode=mode, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "counter", "overrides", "expected"),
    [
        ("spread", 0xCFF0EB02, {}, "20be0ffc-314a-bd53-7a50-013a65ca76d2"),
        ("spread", 0x87654321, {}, "12345678-314a-bd53-7a50-013a65ca76d2"),
        # state 0xF42B434B: + step wraps to exactly 0
        ("spread", 0x00000000, {}, "00000000-314a-bd53-7a50-013a65ca76d2"),
        ("sequential", 0xCFF0EB02, {}, "cff0eb02-314a-bd53-7a50-013a65ca76d2"),
        ("spread", 0xCFF0EB02, {"mac": 0xAABBCCDDEEFF}, "20be0ffc-314a-bcdd-eeff-013a65ca76d2"),
        ("spread", 0xCFF0EB02, {"pid": 65535}, "20be0ffc-ffff-bd53-7a50-013a65ca76d2"),
        # the MAC may be given as 6 bytes, the pid is used mod 65536
        (
            "spread",
            0xCFF0EB02,
            {"mac": bytes.fromhex("12345d537a50"), "pid": PID + 65536},
            "20be0ffc-314a-bd53-7a50-013a65ca76d2",
        ),
    ],
)
def test_spec_vectors(mode: str, counter: int, overrides: dict[str, object], expected: str) -> None:
    assert str(generator_for(counter, mode, **overrides).generate()) == expected
    assert generator_for(counter, mode, **overrides).generate_str() == expected


def test_wrapping_state_of_the_spec() -> None:
    generator = LocalityUUIDGenerator(pid=PID, mac=MAC, clock=lambda: T, counter=0xF42B434B)
    assert str(generator.generate()) == "00000000-314a-bd53-7a50-013a65ca76d2"


def test_sequential_start_of_the_spec() -> None:
    # Window "20121015185", MD5 begins 3f54b801, read little-endian.
    assert sequential_start(T) == 0x01B8543F == 28_857_407
    generator = LocalityUUIDGenerator(pid=PID, mac=MAC, clock=lambda: T, mode="sequential")
    assert str(generator.generate()) == "01b85440-314a-bd53-7a50-013a65ca76d2"


def test_decoding_the_blog_example() -> None:
    value = LocalityUUID("20be0ffc-314a-bd53-7a50-013a65ca76d2")
    assert value.version == 0xB
    assert value.pid == 12618
    assert value.node == 0xD537A50
    assert value.timestamp_ms == 1350327498450
    assert value.timestamp == dt.datetime(2012, 10, 15, 18, 58, 18, 450000, tzinfo=dt.timezone.utc)
    assert value.spread_counter == 0xCFF0EB02 == 3_488_672_514
    assert value.sequential_counter == 0x20BE0FFC


def test_reverse_hex_digits_reverses_digits_not_bits_or_bytes() -> None:
    assert reverse_hex_digits(0x87654321) == 0x12345678
    assert reverse_hex_digits(0xCFF0EB02) == 0x20BE0FFC
    assert reverse_hex_digits(0x0000000F) == 0xF0000000


@given(st.integers(0, 2**32 - 1))
def test_reverse_hex_digits_matches_string_reversal(value: int) -> None:
    assert reverse_hex_digits(value) == int(f"{value:08x}"[::-1], 16)
    assert reverse_hex_digits(reverse_hex_digits(value)) == value


@given(
    counter=st.integers(0, 2**32 - 1),
    pid=st.integers(0, 2**16 - 1),
    node=st.integers(0, 2**28 - 1),
    timestamp_ms=st.integers(0, 2**48 - 1),
    mode=st.sampled_from(["spread", "sequential"]),
)
def test_every_field_round_trips(
    counter: int, pid: int, node: int, timestamp_ms: int, mode: str
) -> None:
    value = LocalityUUID.from_fields(
        counter=counter,
        pid=pid,
        node=node,
        timestamp_ms=timestamp_ms,
        mode=mode,  # type: ignore[arg-type]
    )
    for parsed in (
        value,
        LocalityUUID(str(value)),
        LocalityUUID(str(value).upper()),
        LocalityUUID(value.hex),
        LocalityUUID(value.bytes),
        LocalityUUID(Binary(value.bytes, 4)),
        LocalityUUID(uuid.UUID(str(value))),
        pickle.loads(pickle.dumps(value)),
        copy.deepcopy(value),
    ):
        assert parsed == value
        assert type(parsed) is LocalityUUID
        assert (parsed.pid, parsed.node, parsed.timestamp_ms, parsed.version) == (
            pid,
            node,
            timestamp_ms,
            0xB,
        )
        read_counter = parsed.spread_counter if mode == "spread" else parsed.sequential_counter
        assert read_counter == counter


@given(
    counter=st.integers(0, 2**32 - 1),
    pid=st.integers(0, 2**16 - 1),
    mac=st.integers(0, 2**48 - 1),
    now=st.integers(0, 2**48 - 1),
    mode=st.sampled_from(["spread", "sequential"]),
)
def test_generated_ids_carry_their_inputs(
    counter: int, pid: int, mac: int, now: int, mode: str
) -> None:
    generator = LocalityUUIDGenerator(
        pid=pid, mac=mac, clock=lambda: now, counter=counter, mode=mode
    )  # type: ignore[arg-type]
    value = generator.generate()
    step = SPREAD_STEP if mode == "spread" else 1
    assert (value.pid, value.node, value.timestamp_ms) == (pid, mac & 0xFFFFFFF, now)
    read_counter = value.spread_counter if mode == "spread" else value.sequential_counter
    assert read_counter == (counter + step) % 2**32
    assert generator.generate_str() == str(
        LocalityUUID.from_fields(
            counter=(counter + 2 * step) % 2**32,
            pid=pid,
            node=mac & 0xFFFFFFF,
            timestamp_ms=now,
            mode=mode,  # type: ignore[arg-type]
        )
    )


GOOD = "20be0ffc-314a-bd53-7a50-013a65ca76d2"

BAD_TEXT = [
    "",  # empty
    "20be0ffc",  # far too short
    GOOD[:-1],  # one digit short
    GOOD + "0",  # one digit long
    GOOD.replace("-", "_"),  # wrong separator
    GOOD.replace("-", "", 1),  # one hyphen missing
    "20be0ffc314a-bd53-7a50-013a65ca76d2-",  # hyphens in the wrong places
    "g0be0ffc-314a-bd53-7a50-013a65ca76d2",  # non-hex letter (Ruby accepted g-z)
    "z" * 32,  # 32 characters, none hex
    f"{{{GOOD}}}",  # braces
    f"urn:uuid:{GOOD}",  # URN form
    f" {GOOD}",  # leading space
    f"{GOOD}\n",  # trailing newline (a regex with $ would accept it)
    f"{GOOD}\n{GOOD}",  # two lines (Ruby accepted multi-line input)
    "\uff12\uff10be0ffc-314a-bd53-7a50-013a65ca76d2",  # full-width digits: isdigit(), not hex
    "0x20be0ffc314abd537a50013a65ca76d2",  # 0x prefix
    "+20be0ffc314abd537a50013a65ca76d",  # a sign
    str(uuid.UUID(int=0x20BE0FFC314A4D537A50013A65CA76D2)),  # valid UUID, version 4, not b
    "00000000-0000-0000-0000-000000000000",  # the nil UUID: version 0
]
BAD_BYTES = [
    b"",  # no bytes
    b"\x00" * 15,  # 15 bytes
    b"\x00" * 17,  # 17 bytes
    Binary(uuid.UUID(GOOD).bytes, 3),  # legacy subtype 3: byte order unknown
    b"\x00" * 16,  # right length, version nibble 0
]
BAD_TYPES = [
    None,
    12345,  # an int (use LocalityUUID.from_fields or uuid.UUID(int=...))
    1.5,
    ["20be0ffc-314a-bd53-7a50-013a65ca76d2"],
    {"id": GOOD},
]


@pytest.mark.parametrize("bad", BAD_TEXT + BAD_BYTES)
def test_bad_values_raise_value_error_quoting_the_input(bad: object) -> None:
    with pytest.raises(ValueError, match="Locality UUID") as info:
        LocalityUUID(bad)  # type: ignore[arg-type]
    assert isinstance(info.value, InvalidIdError)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("bad", BAD_TYPES)
def test_wrong_types_raise_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match=r"str, bytes or uuid\.UUID") as info:
        LocalityUUID(bad)  # type: ignore[arg-type]
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"mode": "random"}, ValueError, "mode='random'"),
        ({"pid": "12"}, TypeError, "pid must be an int"),
        ({"pid": True}, TypeError, "pid must be an int"),
        ({"counter": 1.0}, TypeError, "counter must be an int"),
        ({"mac": 2**48}, ValueError, "48-bit"),
        ({"mac": -1}, ValueError, "48-bit"),
        ({"mac": b"\x00" * 5}, ValueError, "6 bytes"),
        ({"mac": "12:34:56:78:9a:bc"}, TypeError, "mac must be a 48-bit int or 6 bytes"),
        ({"clock": 5}, TypeError, "clock must be a callable"),
    ],
)
def test_generator_arguments_are_checked(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        LocalityUUIDGenerator(**kwargs)  # type: ignore[arg-type]


def test_from_fields_rejects_values_that_do_not_fit() -> None:
    with pytest.raises(ValueError, match=r"pid=65536 does not fit in 16"):
        LocalityUUID.from_fields(counter=0, pid=65536, node=0, timestamp_ms=0)
    with pytest.raises(ValueError, match=r"timestamp_ms=-1"):
        LocalityUUID.from_fields(counter=0, pid=0, node=0, timestamp_ms=-1)


def test_mac_environment_override(monkeypatch: pytest.MonkeyPatch) -> None:
    import mongoengine_ids.locality.generator as locality

    monkeypatch.setattr(locality, "_machine_mac", None)
    monkeypatch.setenv("MONGOENGINE_IDS_MAC", "aa:bb:cc:dd:ee:ff")
    assert LocalityUUIDGenerator(clock=lambda: T).generate().node == 0xCDDEEFF
    monkeypatch.setattr(locality, "_machine_mac", None)
    monkeypatch.setenv("MONGOENGINE_IDS_MAC", "not a mac")
    with pytest.raises(ValueError, match="'not a mac' is not a valid MAC address"):
        LocalityUUIDGenerator()
    monkeypatch.setattr(locality, "_machine_mac", None)


@pytest.mark.parametrize(
    ("detected", "warns"),
    [
        (0x02FC00000001, True),  # locally administered: containers and VMs share these
        (0x001B21AABBCC, False),  # a vendor-assigned (universal) address
        (0x03FC00000001, False),  # multicast bit: uuid.getnode()'s random per-process fallback
    ],
)
def test_a_locally_administered_mac_warns(
    monkeypatch: pytest.MonkeyPatch, detected: int, warns: bool
) -> None:
    import warnings

    import mongoengine_ids.locality.generator as locality

    monkeypatch.setattr(locality, "_machine_mac", None)
    monkeypatch.delenv("MONGOENGINE_IDS_MAC", raising=False)
    monkeypatch.setattr(locality.uuid, "getnode", lambda: detected)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        node = LocalityUUIDGenerator().node
    assert node == detected & 0xFFFFFFF
    found = [w for w in caught if w.category is RuntimeWarning]
    messages = [str(w.message) for w in found]
    if warns:
        assert [w.filename for w in found] == [__file__]  # the user's line (review AG)
        assert len(messages) == 1
        assert "02:fc:00:00:00:01" in messages[0]
        assert "MONGOENGINE_IDS_MAC" in messages[0]
    else:
        assert messages == []
    monkeypatch.setattr(locality, "_machine_mac", None)


def test_with_warnings_as_errors_only_the_first_generator_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Probe: with ``-W error``, the shared-MAC warning was raised before the MAC was kept, so
    every generator (every save of a Locality UUID) failed, not only the first."""
    import warnings

    import mongoengine_ids.locality.generator as locality

    monkeypatch.setattr(locality, "_machine_mac", None)
    monkeypatch.delenv("MONGOENGINE_IDS_MAC", raising=False)
    monkeypatch.setattr(locality.uuid, "getnode", lambda: 0x02FC00000001)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RuntimeWarning, match="locally administered MAC"):
            LocalityUUIDGenerator()
        assert LocalityUUIDGenerator().node == 0x02FC00000001 & 0xFFFFFFF
    monkeypatch.setattr(locality, "_machine_mac", None)


def test_the_mac_is_read_with_no_lock_held(monkeypatch: pytest.MonkeyPatch) -> None:
    """Probe BH: ``uuid.getnode()`` may run ``ip`` in a subprocess, which under gevent patched
    after import switches to other green threads; they waited for the (OS) locks it was read
    under, and the process hung on its first Locality writes."""
    import mongoengine_ids.locality.field as locality_field
    import mongoengine_ids.locality.generator as locality

    held: list[bool] = []

    def getnode() -> int:
        locks = (locality._machine_mac_lock, locality_field._generator_lock)
        held.append(any(lock.lock.locked() for lock in locks))
        return 0x001B21AABBCC

    monkeypatch.setattr(locality, "_machine_mac", None)
    monkeypatch.delenv("MONGOENGINE_IDS_MAC", raising=False)
    monkeypatch.setattr(locality.uuid, "getnode", getnode)
    assert locality_field.LocalityUUIDField().generator.node == 0x001B21AABBCC & 0xFFFFFFF
    assert held == [False]
    assert LocalityUUIDGenerator().node == 0x001B21AABBCC & 0xFFFFFFF  # read once
    assert held == [False]
    monkeypatch.setattr(locality, "_machine_mac", None)


def test_default_pid_is_the_process_id() -> None:
    assert LocalityUUIDGenerator().generate().pid == os.getpid() % 65536


# -- uniqueness ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["spread", "sequential"])
def test_eight_threads_never_repeat(mode: str) -> None:
    # A frozen clock makes every id share one millisecond: only the counter keeps them apart.
    generator = LocalityUUIDGenerator(clock=lambda: T, counter=0, mode=mode)  # type: ignore[arg-type]
    per_thread, threads = 50_000, 8
    results: list[list[LocalityUUID]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads)

    def work(out: list[LocalityUUID]) -> None:
        barrier.wait()
        generate = generator.generate
        out.extend(generate() for _ in range(per_thread))

    workers = [threading.Thread(target=work, args=(out,)) for out in results]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    made = [value for out in results for value in out]
    total = per_thread * threads
    assert len(made) == total
    assert len(set(made)) == total
    # Whatever the interleaving, the counters used are exactly the first `total` steps from 0.
    step = SPREAD_STEP if mode == "spread" else 1
    used = {v.spread_counter if mode == "spread" else v.sequential_counter for v in made}
    assert used == {(k * step) % 2**32 for k in range(1, total + 1)}
    assert {v.timestamp_ms for v in made} == {T}


def test_fork_child_has_its_own_pid_and_never_repeats_the_parent() -> None:
    generator = LocalityUUIDGenerator(clock=lambda: T, pid=4242)
    before = generator.generate()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            with os.fdopen(write_end, "w") as out:
                out.write("\n".join(str(generator.generate()) for _ in range(2000)))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        child_ids = [LocalityUUID(line) for line in pipe.read().splitlines()]
    os.waitpid(child, 0)
    parent_ids = [before] + [generator.generate() for _ in range(2000)]
    assert len(child_ids) == 2000
    assert {value.pid for value in child_ids} == {child % 65536}
    assert {value.pid for value in parent_ids} == {4242}
    assert not set(child_ids) & set(parent_ids)
    assert len(set(child_ids)) == 2000


def test_a_clock_failing_in_a_forked_child_leaves_no_generator_with_the_parents_state() -> None:
    """Review AN: one generator's clock raising in the child stopped the reset of the others,
    which kept the parent's pid and counter (the same ids as the parent's)."""

    parent = os.getpid()

    def flaky() -> int:
        if os.getpid() != parent:
            raise RuntimeError("clock not ready in the child")
        return T

    generators = [LocalityUUIDGenerator(mode="sequential", clock=flaky) for _ in range(3)]
    generators += [LocalityUUIDGenerator(counter=123, clock=lambda: T) for _ in range(3)]
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            with os.fdopen(write_end, "w") as out:
                out.write("\n".join(str(g.pid) for g in generators))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        pids = {int(line) for line in pipe.read().splitlines()}
    os.waitpid(child, 0)
    assert pids == {child % 65536}
    assert {g.pid for g in generators} == {parent % 65536}


def test_switching_modes_never_repeats_a_value() -> None:
    # Java's library: sequential -> spread -> sequential in one 10-minute window reset the
    # counter to the same start and repeated an id in the same millisecond.
    generator = LocalityUUIDGenerator(pid=PID, mac=MAC, clock=lambda: T, mode="sequential")
    made = []
    for _ in range(50):
        made += [generator.generate() for _ in range(20)]
        generator.use_spread()
        made += [generator.generate() for _ in range(20)]
        generator.use_sequential()
    assert len(set(made)) == len(made) == 2000
    # Every switch moved on to a millisecond no earlier id used: the time field never decreases.
    stamps = [value.timestamp_ms for value in made]
    assert stamps == sorted(stamps)
    assert stamps[0] == T


@pytest.mark.parametrize("switch", ["use_sequential", "use_spread"])
def test_a_switch_that_fails_changes_nothing(switch: str) -> None:
    """Found by a probe: a switch changed the mode and step, then failed (a bad clock reading,
    the last millisecond): the counter not restarted nor the millisecond moved on, the next
    ids walked back over values already written at that millisecond."""
    readings: list[object] = []
    mode = "spread" if switch == "use_sequential" else "sequential"
    generator = LocalityUUIDGenerator(
        pid=PID,
        mac=MAC,
        clock=lambda: readings.pop(0) if readings else T,
        mode=mode,  # type: ignore[arg-type]
    )
    made = [generator.generate() for _ in range(1000)]
    before = (generator.mode, generator._counter, generator._ms, generator._first)
    readings.append(1.5)
    if switch == "use_sequential":
        with pytest.raises(TypeError, match=r"the clock returned 1\.5"):
            generator.use_sequential()
    else:  # use_spread reads no clock: its millisecond is the last one
        generator._ms = 2**48 - 1
        before = (generator.mode, generator._counter, generator._ms, generator._first)
        with pytest.raises(IdSpaceExhaustedError):
            generator.use_spread()
    assert (generator.mode, generator._counter, generator._ms, generator._first) == before
    if switch == "use_sequential":
        made += [generator.generate() for _ in range(70_000)]
        assert len({value.int for value in made}) == len(made)


def test_sequential_start_past_the_year_9999() -> None:
    # The 48-bit time field reaches 10889-08-02T05:31:50.655Z; the window is written as Java's
    # SimpleDateFormat writes a year of five digits.
    window = "108890802053"
    expected = int.from_bytes(hashlib.md5(window.encode()).digest()[:4], "little")
    assert sequential_start(2**48 - 1) == expected
    generator = LocalityUUIDGenerator(pid=PID, mac=MAC, clock=lambda: 2**48 - 1)
    generator.use_sequential()
    assert generator.generate().sequential_counter == expected + 1
    last = LocalityUUID("ffffffff-ffff-bfff-ffff-ffffffffffff")
    assert last.timestamp_ms == 2**48 - 1
    with pytest.raises(OverflowError, match=r"281474976710655 ms .* past the year 9999"):
        last.timestamp  # noqa: B018


@given(st.integers(min_value=0, max_value=253_402_300_799_999))
def test_sequential_start_is_the_window_datetime_formats(epoch_ms: int) -> None:
    moment = dt.datetime.fromtimestamp(epoch_ms // 1000, tz=dt.timezone.utc)
    window = moment.strftime("%Y%m%d%H%M")[:-1]
    expected = int.from_bytes(hashlib.md5(window.encode()).digest()[:4], "little")
    assert sequential_start(epoch_ms) == expected


def test_switching_to_the_current_mode_changes_nothing() -> None:
    generator = LocalityUUIDGenerator(
        pid=PID, mac=MAC, clock=lambda: T, counter=0, mode="sequential"
    )
    generator.use_sequential()
    assert generator.generate().sequential_counter == 1
    assert generator.generate().timestamp_ms == T
    assert generator.mode == "sequential"


def test_clock_stepping_backwards_never_repeats_and_time_never_goes_back() -> None:
    now = [T]
    generator = LocalityUUIDGenerator(
        pid=PID, mac=MAC, clock=lambda: now[0], mode="sequential", counter=0
    )
    made = [generator.generate() for _ in range(10)]
    now[0] = T - 60_000  # NTP steps the clock back a minute
    made += [generator.generate() for _ in range(10)]
    assert len(set(made)) == 20
    assert [value.timestamp_ms for value in made] == [T] * 20
    now[0] = T + 1
    assert generator.generate().timestamp_ms == T + 1


def test_all_counter_values_used_in_one_millisecond_moves_to_the_next() -> None:
    # The millisecond T begins with counter state 5, so its ids use 6, 7, ... The 2**32-th id
    # would bring the state back to 5 and the one after it would repeat 6: the generator moves
    # to T + 1 at the 2**32-th (one early, never late).
    generator = LocalityUUIDGenerator(
        pid=PID, mac=MAC, clock=lambda: T, mode="sequential", counter=5
    )
    first = generator.generate()
    assert (first.sequential_counter, first.timestamp_ms) == (6, T)
    generator._counter = 3  # type: ignore[attr-defined]  # fast-forward 2**32 - 3 ids
    last_at_t = generator.generate()
    assert (last_at_t.sequential_counter, last_at_t.timestamp_ms) == (4, T)
    moved = generator.generate()
    assert (moved.sequential_counter, moved.timestamp_ms) == (5, T + 1)
    after = generator.generate()
    assert (after.sequential_counter, after.timestamp_ms) == (6, T + 1)
    assert after != first


def test_values_are_uuids_usable_where_uuids_are() -> None:
    value = LocalityUUIDGenerator(pid=PID, mac=MAC, clock=lambda: T, counter=0).generate()
    assert isinstance(value, uuid.UUID)
    assert uuid.UUID(str(value)) == value
    assert {value: 1}[uuid.UUID(str(value))] == 1
    assert repr(value) == f"LocalityUUID('{value}')"
    assert eval(repr(value), {"LocalityUUID": LocalityUUID}) == value


@pytest.mark.parametrize("mode", ["spread", "sequential"])
def test_generate_many_makes_what_as_many_generate_calls_would(mode: str) -> None:
    def make() -> LocalityUUIDGenerator:
        return LocalityUUIDGenerator(
            pid=7,
            mac=0xAABBCCDDEEFF,
            clock=lambda: 1_000,
            counter=5,
            mode=mode,  # type: ignore[arg-type]
        )

    one, many = make(), make()
    assert many.generate_many(4) == [one.generate() for _ in range(4)]
    assert many.generate_many(0) == []
    assert many.generate() == one.generate()  # the state carried on alike


def test_generate_many_after_the_clock_stepped_back_keeps_the_highest_millisecond() -> None:
    now = [5_000]
    generator = LocalityUUIDGenerator(pid=7, mac=1, clock=lambda: now[0])
    before = generator.generate_many(3)
    now[0] = 4_000
    after = generator.generate_many(3)
    assert {value.timestamp_ms for value in after} == {5_000}
    assert len({*before, *after}) == 6


@pytest.mark.parametrize(("count", "error"), [(-1, ValueError), ("3", TypeError), (2.0, TypeError)])
def test_generate_many_checks_its_count(count: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="count"):
        LocalityUUIDGenerator(mac=1).generate_many(count)  # type: ignore[arg-type]


@pytest.mark.parametrize("method", ["generate", "generate_many"])
def test_every_call_after_the_last_millisecond_is_used_up_raises(method: str) -> None:
    """Found by probe J: generate() advanced its counter before finding the last millisecond
    used up, so the call after the error made that millisecond's first id again. The state is
    set to what 2**32 - 1 ids at that millisecond leave (counter = first + k * step), as the
    ids themselves would take hours to make."""
    last = 2**48 - 1
    generator = LocalityUUIDGenerator(pid=PID, mac=MAC, clock=lambda: last, counter=0)
    first = generator.generate()
    generator._counter = (generator._first - generator._step) % 2**32
    before = (generator._counter, generator._ms, generator._first)
    make = (lambda: generator.generate_many(1)) if method == "generate_many" else generator.generate
    for _ in range(3):
        with pytest.raises(IdSpaceExhaustedError, match="281474976710655"):
            make()
        assert (generator._counter, generator._ms, generator._first) == before
    assert first.timestamp_ms == last


@pytest.mark.parametrize(
    "written",
    ["aa:bb:cc:dd:ee:ff", "AA-BB-CC-DD-EE-FF", "aabbccddeeff", " aa:bb:cc:dd:ee:ff\n"],
)
def test_a_mac_is_read_in_its_three_forms(written: str) -> None:
    assert parse_mac(written) == 0xAABBCCDDEEFF


@pytest.mark.parametrize(
    "written",
    [
        "a:bb:cc:dd:ee:ff0",  # a separator misplaced: another address, silently (probe J)
        "a:a:b:b:c:c:d:d:e:e:f:f",
        "-aa-bb-cc-dd-ee-ff-",
        "aa:bb-cc:dd:ee:ff",  # two separators
        "aa:bb:cc:dd:ee:f",
        "aabb.ccdd.eeff",
        "",
    ],
)
def test_a_mac_in_another_form_is_refused(written: str) -> None:
    with pytest.raises(InvalidIdError, match=re.escape(f"{written!r} is not a valid MAC address")):
        parse_mac(written)


def test_a_system_clock_before_1970_is_refused_by_both_generators(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Probe BR-2: -5 ms was ORed into every Locality id, which came out as -1 every time, and
    # UUID7Generator made negative ints.
    from mongoengine_ids.locality import generator as locality_module
    from mongoengine_ids.standard import UUID7Generator
    from mongoengine_ids.standard import fields as standard_module

    locality = LocalityUUIDGenerator(pid=1)
    uuid7 = UUID7Generator()
    monkeypatch.setattr(locality_module, "_time_ns", lambda: -5_000_000)
    monkeypatch.setattr(standard_module.time, "time_ns", lambda: -5_000_000)
    for make in (locality.generate, locality.generate_str, uuid7.generate):
        with pytest.raises(ValueError, match=r"the system clock reads -5 ms since 1970"):
            make()
    for make_many in (locality.generate_many, uuid7.generate_many):
        with pytest.raises(ValueError, match="before it"):
            make_many(3)
    monkeypatch.undo()
    assert locality.generate().int > 0  # the generators go on once the clock is set
    assert uuid7.generate().version == 7
