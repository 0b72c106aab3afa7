"""Run a function over items in threads, losing nothing finished when the run is interrupted."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable
from typing import TypeVar

from torch_abi_harness.core import processes

T = TypeVar("T")
R = TypeVar("R")


def parallel(
    jobs: int,
    fn: Callable[[T], R],
    items: Iterable[T],
    done: Callable[[R], None],
    on_interrupt: Callable[[], None] | None = None,
) -> list[R]:
    """Run fn over items in threads.

    On an interrupt (or any error) every command the run started is stopped and on_interrupt
    runs, both *before* waiting for the workers; then the results of items that finished
    meanwhile still reach done(), so nothing finished is lost, and the exception goes on.
    """
    results: list[R] = []
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs))
    futures = [pool.submit(fn, item) for item in items]
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
