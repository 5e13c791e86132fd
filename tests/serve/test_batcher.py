"""The batcher: shared batches of similar lengths, fairness, a bounded queue, cancellation,
draining."""

import concurrent.futures

import pytest

from t2t_jax.serve import batcher as batcher_lib
from t2t_jax.serve import engines

from fake_engine import WAIT, FakeEngine, wait_until

BEAM = engines.Settings(beam_size=4)


def _batcher(engine, **options):
  options = {"tokens": engine.source_tokens, "max_tokens": 1000, "max_batch": 4, "max_queue": 16,
             "max_wait": 0.0, "workers": 1, **options}
  batcher = batcher_lib.Batcher(engine.translate, **options)
  batcher.start()
  return batcher


def _texts(future):
  return [t.text for t in future.result(WAIT)]


def _busy(engine, batcher):
  """Holds the only worker in a batch, so that what is submitted next queues up."""
  engine.gate.clear()
  first = batcher.submit(["first"], BEAM)
  assert engine.started.wait(WAIT)
  return first


def test_lines_of_concurrent_requests_share_a_batch_and_come_back_in_order():
  engine = FakeEngine()
  batcher = _batcher(engine, max_batch=8)
  first = _busy(engine, batcher)
  a = batcher.submit(["a1", "a2"], BEAM)
  b = batcher.submit(["b1", "b2", "b3"], BEAM)
  engine.gate.set()
  assert _texts(a) == ["A1 0", "A2 0"] and _texts(b) == ["B1 0", "B2 0", "B3 0"]
  assert _texts(first) == ["FIRST 0"]
  assert sorted(engine.batches[1]) == ["a1", "a2", "b1", "b2", "b3"]
  batcher.stop()


def _long_then_short(long_lines: list[str], short_line: str, max_batch: int) -> list[list[str]]:
  """The batches after a busy one when a long request and then a one-line one queue up."""
  engine = FakeEngine()
  batcher = _batcher(engine, max_batch=max_batch)
  _busy(engine, batcher)
  long = batcher.submit(long_lines, BEAM)
  short = batcher.submit([short_line], BEAM)
  engine.gate.set()
  assert _texts(short) == [short_line.upper() + " 0"] and len(_texts(long)) == len(long_lines)
  batcher.stop()
  return engine.batches[1:]


def test_a_long_request_is_split_so_a_short_one_rides_in_the_next_batch():
  # Lines of one length: each request's first waiting line goes before any second one.
  batches = _long_then_short([f"l{i}" for i in range(10)], "s", max_batch=4)
  assert "s" in batches[0]                     # not after all of the long request
  assert [len(b) for b in batches] == [4, 4, 3]
  # Far from every line of the long request: the short one has the next turn, as no batch
  # took a line of it yet.
  long = [f"l{i} x x x" for i in range(6)]
  assert _long_then_short(long, "s", max_batch=3) == [long[:3], ["s", *long[3:5]], long[5:]]


def test_lines_of_similar_length_share_a_batch_around_the_oldest():
  engine = FakeEngine()
  batcher = _batcher(engine, max_batch=2)
  _busy(engine, batcher)
  short, long = "a b", "a b c d e f"
  futures = [batcher.submit([line], BEAM) for line in (long, short, long, short, short)]
  engine.gate.set()
  assert [_texts(f) for f in futures] == [[line.upper() + " 0"] for line in
                                           (long, short, long, short, short)]
  # The oldest line's batch takes the other long one, though two short ones came before it.
  assert engine.batches[1:] == [[long, long], [short, short], [short]]
  batcher.stop()


def test_a_batch_takes_lines_while_their_tokens_fit_the_budget():
  engine = FakeEngine()
  batcher = _batcher(engine, tokens=len, max_tokens=10, max_batch=3)   # a character a token
  _busy(engine, batcher)
  a = batcher.submit(["aaaa", "aaaa", "aaaa"], BEAM)
  b = batcher.submit(["b" * 14], BEAM)                  # over the budget by itself
  c = batcher.submit(["c"], BEAM)
  engine.gate.set()
  assert _texts(a) == ["AAAA 0"] * 3 and _texts(b) == ["B" * 14 + " 0"] and _texts(c) == ["C 0"]
  # 4 + 4 + 1 tokens (the third aaaa and b do not fit); then b, whose turn it is (no batch
  # took a line of it yet), alone (14 > 10), though a is older.
  assert engine.batches[1:] == [["aaaa", "aaaa", "c"], ["b" * 14], ["aaaa"]]
  batcher.stop()


def test_a_full_token_budget_starts_a_batch_without_waiting():
  engine = FakeEngine()
  batcher = _batcher(engine, tokens=len, max_tokens=6, max_batch=8, max_wait=10 * WAIT)
  assert _texts(batcher.submit(["aaa", "bbb"], BEAM)) == ["AAA 0", "BBB 0"]   # 6 tokens: now
  batcher.stop()


def test_lines_with_other_settings_never_share_a_batch():
  engine = FakeEngine()
  batcher = _batcher(engine, max_batch=8)
  _busy(engine, batcher)
  a = batcher.submit(["a"], BEAM)
  b = batcher.submit(["b"], engines.Settings(beam_size=4, n_best=2))
  engine.gate.set()
  assert _texts(a) == ["A 0"] and [h.text for h in b.result(WAIT)[0].hypotheses] == ["B 0", "B 1"]
  assert engine.batches[1:] == [["a"], ["b"]]
  batcher.stop()


def test_a_full_queue_refuses_at_once_and_a_cancelled_request_frees_its_lines():
  engine = FakeEngine()
  batcher = _batcher(engine, max_queue=5)
  _busy(engine, batcher)
  waiting = batcher.submit(["w1", "w2", "w3"], BEAM)
  with pytest.raises(batcher_lib.Overloaded, match="at most 5 lines"):
    batcher.submit(["x", "y", "z"], BEAM)
  assert batcher.queued == 3
  batcher.cancel(waiting)
  assert batcher.queued == 0 and waiting.cancelled()
  later = batcher.submit(["x", "y", "z"], BEAM)       # fits now
  engine.gate.set()
  assert _texts(later) == ["X 0", "Y 0", "Z 0"]
  assert all("w1" not in batch for batch in engine.batches)
  batcher.stop()


def test_stop_finishes_the_queued_lines_then_refuses_new_ones():
  engine = FakeEngine()
  batcher = _batcher(engine)
  first = _busy(engine, batcher)
  queued = batcher.submit(["q"], BEAM)
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    stopping = pool.submit(batcher.stop)
    wait_until(lambda: batcher._stopping, "the batcher stops")  # pylint: disable=protected-access
    with pytest.raises(batcher_lib.Stopped):
      batcher.submit(["late"], BEAM)
    engine.gate.set()
    stopping.result(WAIT)
  assert _texts(first) == ["FIRST 0"] and _texts(queued) == ["Q 0"]


def test_a_failed_batch_fails_its_requests_and_the_batcher_goes_on():
  engine = FakeEngine()
  calls = []

  def translate(lines, settings):
    calls.append(lines)
    if len(calls) == 1:
      raise ValueError("engine broke")
    return engine.translate(lines, settings)

  batcher = batcher_lib.Batcher(translate, tokens=len, max_tokens=1000, max_batch=4,
                                max_queue=16, max_wait=0.0, workers=1)
  batcher.start()
  failed = batcher.submit(["a"], BEAM)
  with pytest.raises(ValueError, match="engine broke"):
    failed.result(WAIT)
  assert _texts(batcher.submit(["b"], BEAM)) == ["B 0"]
  batcher.stop()
