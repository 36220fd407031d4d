"""Helpers shared by the test modules (import as ``from _support import ...``)."""

from __future__ import annotations

import os

import pytest

TEST_URI = os.environ.get("MONGOENGINE_IDS_TEST_URI") or None

#: Marks a test that only a real mongod can prove (true concurrency, server error details).
real_server = pytest.mark.skipif(
    TEST_URI is None, reason="needs a real mongod: set MONGOENGINE_IDS_TEST_URI"
)
