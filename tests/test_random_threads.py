"""RandomUniqueField under threads: a tiny space, many collisions, every value exactly once."""

from __future__ import annotations

import threading

import mongoengine as me
import pytest
from _support import TEST_URI

from mongoengine_ids import RandomUniqueField
from mongoengine_ids.testing import connected_threadsafe


class Ticket(me.Document):
    # 900 values (100..999): 8 threads x 75 saves fill two thirds of it, so saves collide often.
    code = RandomUniqueField(digits=3, max_retries=200, warn_collision_rate=1.0)
    worker = me.IntField()


@pytest.mark.slow
def test_threads_saving_into_a_tiny_space_never_duplicate() -> None:
    threads, per_thread = 8, 75
    with connected_threadsafe(TEST_URI) as connect:
        db = connect()
        Ticket.ensure_indexes()
        barrier = threading.Barrier(threads)
        saved: list[list[int]] = [[] for _ in range(threads)]
        errors: list[BaseException] = []

        def work(worker: int) -> None:
            barrier.wait()
            try:
                for _ in range(per_thread):
                    saved[worker].append(Ticket(worker=worker).save().code)
            except BaseException as error:  # reported below, with the exact set
                errors.append(error)

        pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        assert errors == []
        codes = [code for codes in saved for code in codes]
        stored = sorted(doc["code"] for doc in db["ticket"].find())
        assert len(codes) == threads * per_thread
        assert sorted(codes) == stored  # every value handed out was written, once
        assert len(set(stored)) == len(stored)
        assert all(100 <= code <= 999 for code in stored)
        stats = Ticket.code.stats()
        assert stats.attempts - stats.collisions == threads * per_thread
        assert stats.collisions > 0  # the space was crowded enough to exercise the retries
