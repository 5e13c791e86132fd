"""Several decoding batches at once, their results in input order.

One batch's search is a chain of small dependent operations (a step of the demo
model is about a hundred, most of them too small to split across cores), and
between chunks of steps it waits for the host. On a CPU the busy time of all
threads of one batch's trace adds up to its wall time: one core idles. Two
batches decoded from two threads fill that core and those waits: the demo test
set decodes faster on 2 cores (docs/benchmarks.md, "Decoding"). Each batch is
still decoded alone by the same programs, so no output changes.

Batches start costliest first (`cost`): a test set sorted by length ends with
its longest batches, and started in input order they would run last, alone on
one core while the other idles (a batch of long sentences takes several times
the steps of a batch of short ones: docs/benchmarks.md, "Decoding").
"""

from __future__ import annotations

import concurrent.futures
from typing import Callable, Iterable, Optional, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# Batches decoded at once unless a caller says otherwise; 1 decodes one at a time.
DEFAULT = 2


def ordered_map(fn: Callable[[Item], Result], items: Iterable[Item],
                in_flight: int = DEFAULT,
                cost: Optional[Callable[[Item], float]] = None) -> list[Result]:
  """[fn(item) for item in items], with up to `in_flight` calls running at once.

  `cost(item)`: calls start in decreasing cost (ties in input order), so that the
  longest ones overlap with the rest instead of ending the run alone. When a
  call raises, the calls not yet started are not made; once those under way have
  ended, the exception of the first failed call in item order is raised here.
  """
  if in_flight < 1:
    raise ValueError(f"in_flight={in_flight} must be >= 1 (1: one batch at a time)")
  items = list(items)
  if in_flight == 1 or len(items) < 2:
    return [fn(item) for item in items]
  start = list(range(len(items)))
  if cost is not None:
    start.sort(key=lambda i: -cost(items[i]))
  with concurrent.futures.ThreadPoolExecutor(min(in_flight, len(items)),
                                             thread_name_prefix="t2t_jax-decode") as pool:
    futures = [None] * len(items)
    try:
      for i in start:
        futures[i] = pool.submit(fn, items[i])
      concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
    finally:  # after an error in a call or here (Ctrl-C): the calls not yet started are dropped
      for future in futures:
        if future is not None:
          future.cancel()
    failed = [f for f in futures if not f.cancelled() and f.done() and f.exception()]
    if failed:
      raise failed[0].exception()  # leaving the pool waits for the calls under way
    return [future.result() for future in futures]
