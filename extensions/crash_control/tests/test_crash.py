from crash_control import ops


def test_the_op_is_registered():
    assert hasattr(ops, "segfault")


def test_segfault():
    ops.segfault()  # the process dies here; the harness reports CRASHED naming this test
