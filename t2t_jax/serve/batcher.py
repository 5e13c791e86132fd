"""Dynamic batching: the lines of concurrent requests decoded together, each result sent back.

    batcher = Batcher(engine.translate, tokens=engine.source_tokens, max_tokens=2048,
                      max_batch=16, max_queue=1024, max_wait=0.005)
    batcher.start()
    future = batcher.submit(lines, settings)   # concurrent.futures.Future -> one result per line
    batcher.cancel(future)                     # the client left: its queued lines leave the queue
    batcher.stop()                             # refuses new requests, finishes the queued ones

A batch's budget is in source tokens (`tokens(line)`: its pieces and EOS, what
its row of the batch holds): a worker takes a batch once the lines queued with
the oldest waiting line's settings hold `max_tokens` tokens (or `max_batch`
lines, the rows of one decoded batch), or once that line has waited `max_wait`
seconds. A batch is built around one line of the request whose turn it is (the
one that has waited longest since a batch last took a line of it), then filled
with the queued lines nearest to that line in tokens, while they fit the
budget: lines of similar length share a batch, so it pads little and none of
its sentences waits long for the longest one to finish (a decoded batch runs
until its longest output ends; docs/benchmarks.md, "Serving"). Of lines
equally near, each request's first waiting line goes before any request's second, and
older requests first: a long request is split across batches and the requests
that came after it ride in the next batch instead of waiting for all of it; a
line that does not fit the budget waits for a batch of its own turn (alone if it
is over the budget by itself). `workers` batches decode at once: while one
decodes, the next one fills.
The queue holds at most `max_queue` lines: a request that does not fit is
refused at once (`Overloaded`) rather than held in memory.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import itertools
import logging
import threading
import time
from typing import Any, Callable, Hashable, Optional, Sequence

log = logging.getLogger(__name__)

Translate = Callable[[list[str], Hashable], Sequence[Any]]


class Overloaded(RuntimeError):
  """The queue cannot take the request's lines now; the client should retry later."""


class Stopped(RuntimeError):
  """The batcher is shutting down and takes no new requests."""


@dataclasses.dataclass(eq=False)
class _Request:
  lines: list[str]
  settings: Hashable
  future: concurrent.futures.Future
  arrived: float           # time.monotonic()
  number: int              # arrival order
  results: list[Any]
  tokens: list[int]        # each line's source tokens
  untaken: list[int] = dataclasses.field(default_factory=list)   # lines not yet in a batch
  served: int = -1         # the number of the last batch that took one of its lines
  left: int = 0            # results still to come

  @property
  def waiting(self) -> int:
    return len(self.untaken)


class Batcher:
  """Queues lines of many requests and decodes them in shared batches on worker threads."""

  def __init__(self, translate: Translate, *, tokens: Callable[[str], int], max_tokens: int,
               max_batch: int, max_queue: int, max_wait: float = 0.005, workers: int = 3,
               on_batch: Optional[Callable[[int, float], None]] = None):
    """`translate(lines, settings)` decodes one batch; `tokens(line)` counts a line's source
    tokens (on the submitting thread); `on_batch(lines, seconds)` after each batch."""
    if min(max_tokens, max_batch, max_queue, workers) < 1 or max_wait < 0:
      raise ValueError(f"max_tokens={max_tokens}, max_batch={max_batch}, max_queue={max_queue} "
                       f"and workers={workers} must be >= 1 and max_wait={max_wait} >= 0")
    self._translate, self._tokens, self._on_batch = translate, tokens, on_batch
    self.max_tokens, self.max_batch = max_tokens, max_batch
    self.max_queue, self.max_wait = max_queue, max_wait
    self._cond = threading.Condition()
    self._waiting: collections.OrderedDict[int, _Request] = collections.OrderedDict()
    self._by_future: dict[concurrent.futures.Future, _Request] = {}
    self._queued = 0
    self._arrived = itertools.count()
    self._batches = itertools.count()
    self._stopping = False
    self._threads = [threading.Thread(target=self._work, name=f"t2t_jax-batcher-{i}", daemon=True)
                     for i in range(workers)]

  @property
  def queued(self) -> int:
    """Lines waiting for a batch."""
    return self._queued

  def start(self) -> None:
    for thread in self._threads:
      thread.start()

  def stop(self, timeout: Optional[float] = None) -> None:
    """No new requests; the workers finish every queued line, then end."""
    with self._cond:
      self._stopping = True
      self._cond.notify_all()
    for thread in self._threads:
      if thread.is_alive():
        thread.join(timeout)

  def submit(self, lines: Sequence[str], settings: Hashable) -> concurrent.futures.Future:
    """A future of one result per line, in order. Overloaded if the queue cannot take them."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    if not lines:
      future.set_result([])
      return future
    tokens = [self._tokens(line) for line in lines]
    with self._cond:
      if self._stopping:
        raise Stopped("the server is shutting down")
      if self._queued + len(lines) > self.max_queue:
        raise Overloaded(f"the queue holds {self._queued} of at most {self.max_queue} lines; "
                         f"{len(lines)} more do not fit")
      request = _Request(list(lines), settings, future, time.monotonic(), next(self._arrived),
                         [None] * len(lines), tokens, list(range(len(lines))), left=len(lines))
      self._waiting[id(request)] = request
      self._by_future[future] = request
      self._queued += len(lines)
      self._cond.notify()
    return future

  def cancel(self, future: concurrent.futures.Future) -> None:
    """Drops a request's queued lines (those in a batch already finish, unused)."""
    with self._cond:
      request = self._by_future.get(future)
      if request is not None:
        self._drop(request)
      future.cancel()

  # ------------------------------------------------------------------ workers

  def _ready(self, now: float) -> Optional[float]:
    """None when a batch should be taken now, else how long to wait for one."""
    oldest = next(iter(self._waiting.values()))
    same = [r for r in self._waiting.values() if r.settings == oldest.settings]
    lines = sum(r.waiting for r in same)
    tokens = sum(r.tokens[i] for r in same for i in r.untaken)
    if lines >= self.max_batch or tokens >= self.max_tokens or self._stopping:
      return None
    wait = oldest.arrived + self.max_wait - now
    return wait if wait > 0 else None

  def _take(self) -> Optional[tuple[Hashable, list[tuple[_Request, int]]]]:
    """The next batch, (settings, [(request, line index)]); None once stopped and empty."""
    with self._cond:
      while True:
        if not self._waiting:
          if self._stopping:
            return None
          self._cond.wait()
          continue
        wait = self._ready(time.monotonic())
        if wait is None:
          break
        self._cond.wait(wait)
      settings = next(iter(self._waiting.values())).settings
      batch = self._fill(settings)
      self._queued -= len(batch)
      return settings, batch

  def _fill(self, settings: Hashable) -> list[tuple[_Request, int]]:
    """Lines with `settings` around the line of the request whose turn it is, nearest in
    tokens first, while they fit in `max_tokens` and `max_batch` (the first line always);
    the lock is held.

    The turn goes to the request a batch took a line of longest ago (one never
    taken from first, oldest first). Of lines equally near, a request's earlier
    waiting lines go first, and among lines of the same rank the older request.
    """
    same = [r for r in self._waiting.values() if r.settings == settings]
    first = min(same, key=lambda r: (r.served, r.number))
    anchor = first.tokens[first.untaken[0]]
    near = sorted(((abs(r.tokens[i] - anchor), rank, r.number, i, r)
                   for r in same for rank, i in enumerate(r.untaken)
                   if (r, i) != (first, first.untaken[0])), key=lambda n: n[:3])
    number = next(self._batches)
    batch, budget = [], self.max_tokens
    for request, index in [(first, first.untaken[0])] + [(r, i) for *_, i, r in near]:
      if len(batch) == self.max_batch:
        break
      cost = request.tokens[index]
      if batch and cost > budget:
        continue
      batch.append((request, index))
      budget -= cost
      request.served = number
    for request in {r for r, _ in batch}:
      taken = {i for r, i in batch if r is request}
      request.untaken = [i for i in request.untaken if i not in taken]
      if not request.untaken:
        del self._waiting[id(request)]
    return batch

  def _work(self) -> None:
    while (taken := self._take()) is not None:
      settings, batch = taken
      start = time.monotonic()
      try:
        results = self._translate([r.lines[i] for r, i in batch], settings)
        if len(results) != len(batch):
          raise RuntimeError(f"the engine gave {len(results)} results for {len(batch)} lines")
      except Exception as e:  # pylint: disable=broad-except  (goes to the requests' futures)
        log.exception("a batch of %d lines failed", len(batch))
        self._fail({r for r, _ in batch}, e)
        continue
      if self._on_batch is not None:
        self._on_batch(len(batch), time.monotonic() - start)
      self._deliver(batch, results)

  def _deliver(self, batch: list[tuple[_Request, int]], results: Sequence[Any]) -> None:
    with self._cond:
      for (request, index), result in zip(batch, results):
        request.results[index] = result
        request.left -= 1
        if request.left == 0:
          self._by_future.pop(request.future, None)
          if not request.future.done():   # not cancelled, nor failed in another batch
            request.future.set_result(request.results)

  def _fail(self, requests: set[_Request], error: Exception) -> None:
    with self._cond:
      for request in requests:
        self._drop(request)
        if not request.future.done():
          request.future.set_exception(error)

  def _drop(self, request: _Request) -> None:
    """Takes a request's queued lines out of the queue (the lock is held)."""
    self._by_future.pop(request.future, None)
    if self._waiting.pop(id(request), None) is not None:
      self._queued -= request.waiting
      request.untaken = []
