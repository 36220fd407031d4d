"""Exact-set uniqueness of leased sequences under threads and processes.

On mongomock every operation is made atomic (``connected_threadsafe``), as on a real server:
mongomock alone hands the same counter value to several threads. True concurrency between
processes is proven only against a real mongod (``MONGOENGINE_IDS_TEST_URI``).
"""

from __future__ import annotations

import multiprocessing
import threading
from typing import Any

import pytest
from _support import TEST_URI, real_server, run_threads
from mongoengine import Document, IntField

from mongoengine_ids.sequence import DEFAULT_COLLECTION, Sequence, SequenceField
from mongoengine_ids.testing import Connect

THREADS = 8


@pytest.mark.slow
@pytest.mark.parametrize("prefetch", [False, True], ids=["no-prefetch", "prefetch"])
def test_eight_threads_hundred_thousand_values_each(
    atomic_connect: Connect, prefetch: bool
) -> None:
    db = atomic_connect()
    per_thread = 100_000
    # Small blocks, so that threads really do meet at refills: 12,500 leases without prefetch.
    # With it, 6,250: each prefetch thread waits for the GIL (5 ms switch interval) behind 8
    # busy threads, which took 10 s for 64-value blocks against 1.4 s without prefetch.
    batch_size = 128 if prefetch else 64
    sequence = Sequence("hot", database=db, batch_size=batch_size, prefetch=prefetch)

    def work(_: int) -> list[int]:
        take = sequence.next
        return [take() for _ in range(per_thread)]

    results = run_threads(THREADS, work)
    handed_out = [value for result in results for value in result]
    # Every value exactly once, and no gap: blocks are consumed in the order they were leased.
    assert len(handed_out) == THREADS * per_thread
    assert set(handed_out) == set(range(1, THREADS * per_thread + 1))
    for result in results:
        assert result == sorted(result)  # each thread sees increasing values
    flight = sequence._flight
    if flight is not None:
        flight.done.wait(timeout=60)
    stored = db[DEFAULT_COLLECTION].find_one({"_id": "hot"})
    # Without prefetch the last block is used up exactly; with it, the next one was leased.
    expected_next = THREADS * per_thread + (batch_size if prefetch else 0)
    assert stored == {"_id": "hot", "next": expected_next}


def test_threads_saving_documents_get_distinct_ids(atomic_connect: Connect) -> None:
    db = atomic_connect()

    class Event(Document):
        id = SequenceField(primary_key=True, batch_size=16, prefetch=True)
        worker = IntField()

    per_thread = 300

    def work(index: int) -> list[int]:
        ids = []
        for _ in range(per_thread):
            event = Event(worker=index)
            event.save()
            ids.append(event.id)
        return ids

    results = run_threads(THREADS, work)
    ids = [value for result in results for value in result]
    stored = sorted(doc["_id"] for doc in db["event"].find())
    assert sorted(ids) == stored
    assert len(set(ids)) == THREADS * per_thread
    assert set(ids) == set(range(1, THREADS * per_thread + 1))


def test_threads_on_sharded_counters_stay_in_their_ranges(atomic_connect: Connect) -> None:
    db = atomic_connect()
    sequence = Sequence("sharded", database=db, start=0, digits=4, shards=10, batch_size=25)
    per_thread = 1_250  # 8 x 1,250 = every one of the 10,000 values

    results = run_threads(THREADS, lambda _: [sequence.next() for _ in range(per_thread)])
    handed_out = [value for result in results for value in result]
    assert sorted(handed_out) == list(range(10_000))
    for doc in db[DEFAULT_COLLECTION].find():
        assert doc["next"] == doc["high"] == doc["low"] + 999


# -- several processes against a real server ----------------------------------------------------


def _process_worker(
    uri: str, database: str, count: int, prefetch: bool
) -> tuple[list[int], list[int]]:
    """Run in a fresh (spawned) process: take ``count`` values with 2 threads; return them, and
    the values the process still holds unused (its leased blocks) at the end."""
    import pymongo

    client: pymongo.MongoClient[Any] = pymongo.MongoClient(uri)
    try:
        sequence = Sequence("multi", database=client[database], batch_size=50, prefetch=prefetch)
        halves: list[list[int]] = [[], []]

        def take(index: int) -> None:
            halves[index] = [sequence.next() for _ in range(count // 2)]

        threads = [threading.Thread(target=take, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        flight = sequence._flight  # a prefetch still leasing: its block is held too
        if flight is not None:
            assert flight.done.wait(timeout=60)
        held = list(sequence._iterator) + [value for block in sequence._ready for value in block]
        return halves[0] + halves[1], held
    finally:
        client.close()


@real_server
@pytest.mark.parametrize("prefetch", [False, True], ids=["no-prefetch", "prefetch"])
def test_processes_against_a_real_server_never_share_a_value(
    atomic_connect: Connect, prefetch: bool
) -> None:
    db = atomic_connect()
    assert TEST_URI is not None
    processes, per_process = 4, 20_000
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        results = pool.starmap(
            _process_worker,
            [(TEST_URI, db.name, per_process, prefetch)] * processes,
        )
    handed_out = [value for result, _ in results for value in result]
    held = [value for _, unused in results for value in unused]
    assert len(handed_out) == processes * per_process
    stored = db[DEFAULT_COLLECTION].find_one({"_id": "multi"})
    if not prefetch:
        # Blocks are leased only when a value is needed, and 20,000 is 400 blocks of 50: every
        # value leased was handed out, exactly once.
        assert held == []
        assert sorted(handed_out) == list(range(1, processes * per_process + 1))
        assert stored == {"_id": "multi", "next": processes * per_process}
        return
    # Prefetched blocks may be left unused: every value leased (1..next) is handed out or
    # still held by the process that leased it, exactly once.
    assert stored is not None
    assert stored == {"_id": "multi", "next": stored["next"]}
    assert sorted(handed_out + held) == list(range(1, stored["next"] + 1))
