"""Helpers the tests of gradverify.strategies share."""

from __future__ import annotations

from hypothesis import settings

FAST = settings(max_examples=60, deadline=None, database=None)
