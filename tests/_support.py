"""Helpers shared by the test modules (import as ``from _support import ...``)."""

from __future__ import annotations

import os

import pytest
from pymongo import ReadPreference

TEST_URI = os.environ.get("MONGOENGINE_IDS_TEST_URI") or None

#: The options of the tests' connections. On mongomock they read on a secondary where they may
#: (mongomock has none, so nothing changes): every read the package makes itself must still go
#: to the primary, which the guard in conftest.py checks.
CLIENT_OPTIONS = {} if TEST_URI else {"read_preference": ReadPreference.SECONDARY_PREFERRED}

#: Marks a test that only a real mongod can prove (true concurrency, server error details).
real_server = pytest.mark.skipif(
    TEST_URI is None, reason="needs a real mongod: set MONGOENGINE_IDS_TEST_URI"
)
