"""Run a function over items in threads, losing nothing finished when the run is interrupted, and let the items take
a shared resource in the order they were given (`in_turn`), whichever thread reaches it first."""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from torch_abi_harness.core import processes

T = TypeVar("T")
R = TypeVar("R")


class _Turns:
    """One parallel() call's items in the order it was given them: item i's turn comes once every earlier item has
    passed its own (in an `in_turn` block, or by ending without one)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._next = 0  # the first item that has not passed its turn
        self._passed: set[int] = set()  # later items that have

    def wait(self, index: int) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._next >= index)

    def pass_on(self, index: int) -> None:
        with self._changed:
            self._passed.add(index)
            while self._next in self._passed:
                self._passed.discard(self._next)
                self._next += 1
            self._changed.notify_all()


_TURN: contextvars.ContextVar[tuple[_Turns, int] | None] = contextvars.ContextVar("turn", default=None)


@contextlib.contextmanager
def in_turn() -> Iterator[None]:
    """Inside an item of parallel(): wait until every earlier item has passed its turn, and pass this one's on
    leaving the block. What a block takes (a slot of a semaphore) is then taken in the items' order: four threads
    over a run's cells, two cells at a time, start the cells in the run's order even when a later cell's thread
    gets there first. Outside parallel() it waits for nothing."""
    turn = _TURN.get()
    if turn is None:
        yield
        return
    turns, index = turn
    turns.wait(index)
    try:
        yield
    finally:
        turns.pass_on(index)


def parallel(
    jobs: int,
    fn: Callable[[T], R],
    items: Iterable[T],
    done: Callable[[R], None],
    on_interrupt: Callable[[], None] | None = None,
) -> list[R]:
    """Run fn over items in threads, each item's turn (`in_turn`) in the order of items.

    On an interrupt (or any error) every command the run started is stopped and on_interrupt
    runs, both *before* waiting for the workers; then the results of items that finished
    meanwhile still reach done(), so nothing finished is lost, and the exception goes on.
    """
    results: list[R] = []
    turns = _Turns()

    def in_order(index: int, item: T) -> R:
        # The pool's threads take the items first come, first served: when item i runs, every earlier item runs or
        # has ended, so none of them can keep i waiting for a turn it never takes (an item ended passes its turn).
        token = _TURN.set((turns, index))
        try:
            return fn(item)
        finally:
            turns.pass_on(index)
            _TURN.reset(token)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs))
    futures = [pool.submit(in_order, index, item) for index, item in enumerate(items)]
    reported: set[concurrent.futures.Future[R]] = set()
    try:
        for future in concurrent.futures.as_completed(futures):
            result = future.result()
            reported.add(future)
            results.append(result)
            done(result)
    except BaseException:
        for future in futures:
            future.cancel()
        processes.REGISTRY.stop_all()
        if on_interrupt is not None:
            on_interrupt()
        pool.shutdown(wait=True, cancel_futures=True)
        for future in futures:
            if future not in reported and future.done() and not future.cancelled() and future.exception() is None:
                results.append(future.result())
                done(future.result())
        raise
    pool.shutdown(wait=True)
    return results
