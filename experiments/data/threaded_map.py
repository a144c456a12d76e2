"""`threaded_map`: `map(fn, items)` computed in a pool of threads and yielded in order, a bounded
number of calls ahead (the 'numpy' input pipeline builds its batches with it)."""

from __future__ import annotations

import collections
import concurrent.futures
from collections.abc import Callable, Iterable, Iterator


def threaded_map(fn: Callable, items: Iterable, workers: int, ahead: int | None = None) -> Iterator:
  """`map(fn, items)` computed in `workers` threads, yielded in the order of `items`.

  At most `ahead` calls (default 2·workers) are in flight or done but not yet taken, so memory
  stays bounded on an endless `items`. `fn` must be safe to call from several threads at once
  (`input_pipeline.BatchAt` is: a pure function of its step). An exception raised by `fn` is
  re-raised when its item's turn comes; closing the returned generator cancels the calls not yet
  started and does not wait for the running ones.
  """
  if workers < 1:
    raise ValueError(f"threaded_map needs workers >= 1, got {workers}")
  ahead = 2 * workers if ahead is None else ahead
  if ahead < 1:
    raise ValueError(f"threaded_map needs ahead >= 1, got {ahead}")
  items = iter(items)
  executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="threaded_map")
  pending: collections.deque = collections.deque()
  try:
    for item in items:
      pending.append(executor.submit(fn, item))
      if len(pending) == ahead:
        break
    while pending:
      result = pending.popleft().result()
      for item in items:  # refill before handing the result over, so the threads stay busy
        pending.append(executor.submit(fn, item))
        break
      yield result
  finally:
    executor.shutdown(wait=False, cancel_futures=True)
