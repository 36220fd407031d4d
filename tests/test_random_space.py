"""Value spaces of RandomUniqueField: Luhn golden vectors and properties, index <-> value."""

from __future__ import annotations

import os
import threading

import pytest
from _support import in_forked_child
from hypothesis import given
from hypothesis import strategies as st

from mongoengine_ids.random_unique.space import (
    BASE62,
    CROCKFORD32,
    SYSTEM_RANDOMNESS,
    IntegerSpace,
    StringSpace,
    SystemRandomness,
    luhn_check_index,
    luhn_valid,
)
from mongoengine_ids.resets import reset_process_state


@pytest.mark.parametrize(
    ("payload", "check"),
    [
        ("7992739871", 3),  # the textbook example
        ("4539148803436467"[:-1], 7),  # a Visa test number
        ("0", 0),
        ("1", 8),  # 1 doubled = 2; 2 + 8 = 10
        ("9", 1),  # 9 doubled = 18 -> 1 + 8 = 9; 9 + 1 = 10
    ],
)
def test_luhn_decimal_vectors(payload: str, check: int) -> None:
    codes = [int(char) for char in payload]
    assert luhn_check_index(codes, 10) == check
    assert luhn_valid([*codes, check], 10)


@given(
    base=st.sampled_from([10, 32, 62, 2, 6]),
    data=st.data(),
)
def test_luhn_mod_n_catches_every_single_character_error(base: int, data: st.DataObject) -> None:
    codes = data.draw(st.lists(st.integers(0, base - 1), min_size=1, max_size=12))
    full = [*codes, luhn_check_index(codes, base)]
    assert luhn_valid(full, base)
    position = data.draw(st.integers(0, len(full) - 1))
    replacement = data.draw(st.integers(0, base - 1).filter(lambda c: c != full[position]))
    corrupted = list(full)
    corrupted[position] = replacement
    assert not luhn_valid(corrupted, base)


@given(index=st.integers(0, 9 * 10**14 - 1))
def test_integer_luhn_space_values_are_valid_and_distinct_from_neighbours(index: int) -> None:
    space = IntegerSpace.of_digits(16, luhn=True)
    value = space.value(index)
    assert len(str(value)) == 16
    assert space.problem(value) is None
    assert space.problem(value + 1 if value % 10 != 9 else value - 1) is not None


@given(
    alphabet=st.sampled_from(["decimal", "crockford32", "base62"]),
    length=st.integers(1, 12),
    luhn=st.booleans(),
    data=st.data(),
)
def test_string_space_index_maps_to_a_valid_value(
    alphabet: str, length: int, luhn: bool, data: st.DataObject
) -> None:
    if luhn and length < 2:
        length = 2
    space = StringSpace(length, alphabet, prefix="P-", luhn=luhn)
    index = data.draw(st.integers(0, space.size - 1))
    value = space.value(index)
    assert value.startswith("P-")
    assert len(value) == 2 + length
    assert space.problem(value) is None


def test_string_space_is_a_bijection_on_a_small_space() -> None:
    space = StringSpace(3, "wxyz", luhn=True)
    values = [space.value(index) for index in range(space.size)]
    assert len(set(values)) == space.size == 16
    assert all(space.problem(value) is None for value in values)


def test_luhn_needs_an_even_alphabet() -> None:
    # with 7 characters, doubling maps 1 and 4 to the same digit sum: errors would slip through
    with pytest.raises(ValueError, match=r"alphabet='abcdefg' has 7 characters"):
        StringSpace(4, "abcdefg", luhn=True)
    assert StringSpace(4, "abcdefg").size == 7**4  # without a check character, any size


def test_alphabets() -> None:
    assert len(CROCKFORD32) == 32
    assert not set("ILOU") & set(CROCKFORD32)
    assert len(BASE62) == len(set(BASE62)) == 62


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("X-0000", "it does not start with 'P-'"),
        ("P-000", "it has 3 characters after the prefix, not 4"),
        ("P-00U0", "'U' not in the alphabet"),  # U is not Crockford
        (1234, "not a str"),
    ],
)
def test_string_problems(value: object, problem: str) -> None:
    assert StringSpace(4, prefix="P-").problem(value) == problem


# -- the default randomness ---------------------------------------------------------------------


def test_system_randomness_rejects_the_biased_tail() -> None:
    pool = SystemRandomness()
    # 2**64 % 3 == 1: the word 2**64 - 1 lies past the last full multiple of 3 and is thrown
    # away; the next word, 7, gives 7 % 3. (pop() takes words from the end.)
    pool._words = [7, 2**64 - 1]
    assert pool.randbelow(3) == 1
    assert pool._words == []
    pool._words = [5, 2**64 - 2]  # 2**64 - 2 is below the limit: kept, as (2**64 - 2) % 3
    assert pool.randbelow(3) == (2**64 - 2) % 3
    assert pool._words == [5]


@pytest.mark.parametrize(
    ("pinned", "problem"),
    [
        # Probe Z: a test pinning os.urandom (to make uuid.uuid4() predictable) hung save().
        (lambda n: b"\xff" * 16, r"os\.urandom\(4096\) returned 16 bytes, not 4096"),
        (lambda n: b"\x00" * n, r"os\.urandom\(4096\) repeated a 64-bit word"),
        (lambda n: bytes(range(256)) * (n // 256), r"repeated a 64-bit word"),
    ],
)
def test_system_randomness_names_an_os_urandom_that_is_not_random(
    monkeypatch: pytest.MonkeyPatch, pinned: object, problem: str
) -> None:
    pool = SystemRandomness()
    monkeypatch.setattr(os, "urandom", pinned)
    with pytest.raises(RuntimeError, match=problem):
        pool.randbelow(3)


def test_system_randomness_throws_away_words_at_most_128_times_in_a_row() -> None:
    """A source of distinct words all past the last full multiple of n (no os.urandom gives
    such) would have looped forever."""
    pool = SystemRandomness()
    # Below 2**64, the last full multiple of 2**63 + 1 is itself: every word above is thrown.
    pool._words = [2**64 - 1 - k for k in range(200)]
    with pytest.raises(
        RuntimeError, match="gave 128 words in a row at or above 0x8000000000000001"
    ):
        pool.randbelow(2**63 + 1)
    assert len(pool._words) == 200 - 128


def test_a_reset_drops_the_words_read_under_a_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Probe AH: words read while a test patched os.urandom stayed for the tests after it."""
    SYSTEM_RANDOMNESS.randbelow(10)
    assert SYSTEM_RANDOMNESS._words  # a pool read
    reset_process_state()
    assert SYSTEM_RANDOMNESS._words == []


def test_system_randomness_covers_the_space_evenly() -> None:
    pool = SystemRandomness()
    draws = [pool.randbelow(10) for _ in range(100_000)]
    counts = [draws.count(digit) for digit in range(10)]
    # Chi-squared with 9 degrees of freedom: above 40 has probability about 5e-6 for a
    # uniform source; an off-by-one or a biased reduction lands far above it.
    chi2 = sum((count - 10_000) ** 2 / 10_000 for count in counts)
    assert chi2 < 40, counts
    assert set(draws) == set(range(10))


@pytest.mark.parametrize("n", [1, 2, 2**63 + 1, 2**64, 2**64 + 1, 62**22])
def test_system_randomness_stays_below_n(n: int) -> None:
    pool = SystemRandomness()
    assert all(0 <= pool.randbelow(n) < n for _ in range(2_000))


def test_system_randomness_refuses_a_bound_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match=r"n=0 is out of range: expected an int >= 1"):
        SystemRandomness().randbelow(0)


def test_threads_never_share_a_word() -> None:
    pool = SystemRandomness()
    threads, per_thread = 8, 20_000
    drawn: list[list[int]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads)

    def work(index: int) -> None:
        barrier.wait()
        drawn[index].extend(pool.randbelow(2**64) for _ in range(per_thread))

    pool_threads = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for thread in pool_threads:
        thread.start()
    for thread in pool_threads:
        thread.join()
    words = [word for words in drawn for word in words]
    # 160,000 full 64-bit words: a repeat would mean a word was handed out twice.
    assert len(words) == threads * per_thread
    assert len(set(words)) == len(words)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_does_not_replay_the_parents_words() -> None:
    SYSTEM_RANDOMNESS.randbelow(2**64)  # the parent holds a block of unread words now
    _, child = in_forked_child(lambda: [SYSTEM_RANDOMNESS.randbelow(2**64) for _ in range(16)])
    parent = [SYSTEM_RANDOMNESS.randbelow(2**64) for _ in range(16)]
    assert len(child) == 16
    assert set(child).isdisjoint(parent)
