"""Several decoding batches at once, their results in input order.

One batch's search is a chain of small dependent operations (a step of the demo
model is about a hundred, most of them too small to split across cores), and
between chunks of steps it waits for the host. On a CPU the busy time of all
threads of one batch's trace adds up to its wall time: one core idles. Two
batches decoded from two threads fill that core and those waits: the demo test
set decodes 1.35x faster on 2 cores (docs/benchmarks.md). Each batch is still
decoded alone by the same programs, so no output changes.
"""

from __future__ import annotations

import concurrent.futures
from typing import Callable, Iterable, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")

# Batches decoded at once unless a caller says otherwise; 1 decodes one at a time.
DEFAULT = 2


def ordered_map(fn: Callable[[Item], Result], items: Iterable[Item],
                in_flight: int = DEFAULT) -> list[Result]:
  """[fn(item) for item in items], with up to `in_flight` calls running at once.

  The first exception raised by a call (in item order) is raised here once the
  calls under way have ended; calls not yet started are not made.
  """
  if in_flight < 1:
    raise ValueError(f"in_flight={in_flight} must be >= 1 (1: one batch at a time)")
  items = list(items)
  if in_flight == 1 or len(items) < 2:
    return [fn(item) for item in items]
  # Executor.map cancels the calls not yet started when one raises.
  with concurrent.futures.ThreadPoolExecutor(min(in_flight, len(items)),
                                             thread_name_prefix="t2t_jax-decode") as pool:
    return list(pool.map(fn, items))
