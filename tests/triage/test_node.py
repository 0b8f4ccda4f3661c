"""gradverify triage rerun NODE_ID: a pytest node id maps to its JUnit id."""

from __future__ import annotations


def test_node_ids_map_to_junit_ids():
    from gradverify._triage.node import is_node_id, junit_id

    assert junit_id("tests/test_a.py::TestB::test_c[1-2]") == "tests.test_a.TestB::test_c[1-2]"
    assert junit_id("test_a.py::test_b") == "test_a::test_b"
    assert is_node_id("tests/test_a.py") and is_node_id("t.py::x") and not is_node_id("bias_act:relu")
