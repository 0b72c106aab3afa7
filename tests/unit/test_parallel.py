"""parallel(): the items take a shared slot in the order they were given, whichever thread gets there first."""

import threading
import time

import pytest

from torch_abi_harness.core import processes
from torch_abi_harness.core.parallel import in_turn, parallel


def slot_order(items: list[int], threads: int, slots: int, skipped: frozenset[int] = frozenset()) -> list[int]:
    """The order in which items took one of `slots` slots, as CellRunner.execute takes them. Earlier items reach
    the slot later (each sleeps less than the one before it), so first come, first served would run them backwards."""
    taken: list[int] = []
    semaphore = threading.BoundedSemaphore(slots)

    def run(item: int) -> int:
        time.sleep(0.01 * (len(items) - item))
        if item in skipped:  # an item that never takes a slot (a cell that cannot run) passes its turn by ending
            return item
        with in_turn():
            semaphore.acquire()
        try:
            taken.append(item)
            time.sleep(0.005)
        finally:
            semaphore.release()
        return item

    done = parallel(threads, run, items, lambda item: None)
    assert sorted(done) == items
    return taken


@pytest.mark.parametrize(("threads", "slots"), [(2, 1), (4, 2), (8, 1)])
def test_the_items_take_their_slots_in_the_order_given(threads: int, slots: int) -> None:
    items = list(range(12))
    assert slot_order(items, threads, slots) == items


def test_an_item_that_takes_no_slot_keeps_no_later_item_waiting() -> None:
    items = list(range(8))
    assert slot_order(items, 4, 1, skipped=frozenset({0, 3})) == [1, 2, 4, 5, 6, 7]


def test_outside_parallel_a_turn_waits_for_nothing() -> None:
    with in_turn():
        pass


def test_an_item_that_raises_passes_its_turn_and_the_error_reaches_the_caller() -> None:
    def run(item: int) -> int:
        if item == 0:
            raise ValueError("the first item fails")
        with in_turn():
            return item

    try:
        with pytest.raises(ValueError, match="the first item fails"):
            parallel(2, run, [0, 1, 2], lambda item: None)
    finally:
        processes.REGISTRY.reset()  # parallel stopped "the run" on the error: this process runs other tests after
