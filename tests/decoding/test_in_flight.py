"""Several batches at once: results in input order, calls really overlap, errors surface."""

import threading
import time

import pytest

from t2t_jax.decoding import in_flight


def test_results_come_in_input_order_whatever_finishes_first():
  finish_late = threading.Event()

  def fn(item):
    if item == 0:  # the first item ends last
      assert finish_late.wait(timeout=30)
    if item == 3:
      finish_late.set()
    return item * 10

  assert in_flight.ordered_map(fn, range(6), in_flight=2) == [0, 10, 20, 30, 40, 50]


def test_calls_overlap_up_to_in_flight():
  # Both calls must be under way at once to pass the barrier; one at a time, it breaks.
  barrier = threading.Barrier(2, timeout=30)
  assert in_flight.ordered_map(lambda x: barrier.wait() * 0 + x, [1, 2], in_flight=2) == [1, 2]
  lone = threading.Barrier(2, timeout=0.5)
  with pytest.raises(threading.BrokenBarrierError):
    in_flight.ordered_map(lambda x: lone.wait(), [1, 2], in_flight=1)


def test_an_error_in_one_call_is_raised_and_later_calls_are_not_made():
  started = []

  def fn(item):
    started.append(item)
    if item == 0:
      raise ValueError("bad batch 0")
    time.sleep(0.2)
    return item

  with pytest.raises(ValueError, match="bad batch 0"):
    in_flight.ordered_map(fn, range(20), in_flight=2)
  assert len(started) < 20  # the batches still queued were dropped
  with pytest.raises(ValueError, match="in_flight=0 must be >= 1"):
    in_flight.ordered_map(fn, range(4), in_flight=0)


def test_costliest_calls_start_first_and_results_stay_in_input_order():
  started, lock = [], threading.Lock()
  both_busy = threading.Barrier(2, timeout=30)

  def fn(item):
    with lock:
      started.append(item)
      first_two = len(started) <= 2
    if first_two:  # both workers hold their first call: no third can start before
      both_busy.wait()
    return item * 10

  costs = [3, 9, 1, 7, 5, 2]
  assert in_flight.ordered_map(fn, range(6), in_flight=2, cost=lambda i: costs[i]) == \
      [0, 10, 20, 30, 40, 50]
  # The two costliest (items 1 and 3) start first; in input order 0 and 1 would.
  assert set(started[:2]) == {1, 3}


def test_with_costs_an_error_still_drops_the_calls_not_yet_started():
  started = []

  def fn(item):
    started.append(item)
    if item == 19:  # the costliest: the first to start
      raise ValueError("bad batch 19")
    time.sleep(0.2)
    return item

  with pytest.raises(ValueError, match="bad batch 19"):
    in_flight.ordered_map(fn, range(20), in_flight=2, cost=lambda i: i)
  assert started[0] in (18, 19) and len(started) < 20


def test_an_interrupt_while_waiting_drops_the_calls_not_yet_started(monkeypatch):
  started = []

  def fn(item):
    started.append(item)
    time.sleep(0.2)
    return item

  def interrupted(*args, **kwargs):  # Ctrl-C arrives while the results are awaited
    raise KeyboardInterrupt

  monkeypatch.setattr(in_flight.concurrent.futures, "wait", interrupted)
  with pytest.raises(KeyboardInterrupt):
    in_flight.ordered_map(fn, range(20), in_flight=2)
  assert len(started) < 20
