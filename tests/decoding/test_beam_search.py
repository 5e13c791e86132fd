"""decoding/beam_search.py: beam search against brute force on toy step functions (no model); the
next token is the same whichever layout a step's logits come in; the cache between steps."""

import functools
import itertools
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from formats import check_well_formed
from t2t_jax.decoding import beam_search
from t2t_jax.ids import EOS_ID, NEG_INF, PAD_ID, strip_eos
from t2t_jax.kernels import logits as logits_lib


STATES = 97  # hidden states of the toy step function
PACKAGE = pathlib.Path(beam_search.__file__).resolve().parents[1]


def test_beam_search_imports_no_model():
  # What beam search loads, all the way down, in a fresh interpreter: the cache's contract
  # and the logits' layouts and top-k (decode_cache.py, kernels/logits.py), never a module
  # of the model, the model package itself included.
  code = ("import sys, t2t_jax.decoding.beam_search; "
          "print(' '.join(m for m in sys.modules if m.startswith('t2t_jax')))")
  loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              check=True, cwd=PACKAGE.parent,
                              env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)}).stdout.split())
  assert "t2t_jax.decode_cache" in loaded and "t2t_jax.kernels.logits" in loaded
  assert not {m for m in loaded if m == "t2t_jax.model" or m.startswith("t2t_jax.model.")}, loaded
  assert {m for m in loaded if m.startswith("t2t_jax.decoding")} == {
      "t2t_jax.decoding", "t2t_jax.decoding.beam_search"}, loaded


def _toy_hash(h, token, position):
  """Next hidden state: depends on the whole prefix, not only on the last token."""
  return (h * 7 + token * 3 + position + 1) % STATES


def toy_step(cache, tokens, position):
  """A decode_step look-alike: logits = table[row, hash(prefix)]; every leaf has a row dim."""
  h = _toy_hash(cache["h"], tokens, position)
  logits = jnp.take_along_axis(cache["table"], h[:, None, None], axis=1)[:, 0]
  return logits, {**cache, "h": h}


def toy_cache(seed, batch, vocab, scale=2.0):
  table = scale * jax.random.normal(jax.random.key(seed), (batch, STATES, vocab))
  return {"h": jnp.zeros((batch,), jnp.int32), "table": table}


def _log_softmax(x):
  x = np.asarray(x, np.float64)
  x = x - x.max()
  return x - np.log(np.exp(x).sum())


def toy_log_probs(table_row, prefix):
  """Log-probabilities of every token after `prefix`, as beam search sees them (pad banned)."""
  h, previous = 0, 0
  for position in range(len(prefix) + 1):
    h = _toy_hash(h, previous, position)
    previous = prefix[position] if position < len(prefix) else 0
  log_probs = _log_softmax(table_row[h])
  log_probs[PAD_ID] = -np.inf
  return log_probs


def penalised(log_prob, length, alpha):
  return log_prob / ((5.0 + length) / 6.0) ** alpha


def exhaustive_best(table_row, max_len, alpha, vocab, min_len):
  """Best length-penalised hypothesis over every sequence ending in EOS or at max_len,
  EOS after at least `min_len` tokens."""
  best = (-np.inf, None)
  for length in range(1, max_len + 1):
    for seq in itertools.product(range(2, vocab), repeat=length - 1):
      for last in range(1, vocab):
        if (last != EOS_ID and length < max_len) or (last == EOS_ID and length - 1 < min_len):
          continue
        full = [*seq, last]
        log_prob = sum(toy_log_probs(table_row, full[:i])[t] for i, t in enumerate(full))
        best = max(best, (penalised(log_prob, length, alpha), full), key=lambda b: b[0])
  return best


def rescore(table_row, tokens, alpha):
  hyp = strip_eos(tokens)
  full = hyp + [EOS_ID] if EOS_ID in list(tokens) else hyp
  log_prob = sum(toy_log_probs(table_row, full[:i])[t] for i, t in enumerate(full))
  return penalised(log_prob, len(full), alpha)


@pytest.mark.parametrize("alpha,min_len", [(0.6, 0), (1.5, 1), (0.0, 1), (0.0, 2)])
def test_wide_beam_finds_the_exhaustive_best(alpha, min_len):
  vocab, max_len, batch = 5, 4, 4
  cache = toy_cache(seed=int(alpha * 10), batch=batch, vocab=vocab)
  max_lens = np.array([4, 2, 3, 1])
  # 3 words: at most 3^2 * 4 = 36 valid extensions before the last step, so 40
  # beams keep every hypothesis and the search is exact.
  tokens, scores = jax.jit(functools.partial(
      beam_search.beam_search, toy_step, beam_size=40, alpha=alpha, max_len=max_len,
      n_best=3, min_len=min_len))(cache, max_lens=max_lens)
  tokens, scores = np.asarray(tokens), np.asarray(scores)
  check_well_formed(tokens, max_lens)
  table = np.asarray(cache["table"])
  for b in range(batch):
    best_score, best = exhaustive_best(table[b], max_lens[b], alpha, vocab, min_len)
    got = strip_eos(tokens[b, 0])
    assert got == [t for t in best if t != EOS_ID], (b, tokens[b, 0], best)
    np.testing.assert_allclose(scores[b, 0], best_score, rtol=1e-5)
    for n in range(3):
      np.testing.assert_allclose(scores[b, n], rescore(table[b], tokens[b, n], alpha), rtol=1e-5)
    assert np.all(np.diff(scores[b]) <= 0)


def test_beam_of_one_without_length_penalty_is_greedy():
  vocab, max_len, batch = 12, 10, 6
  cache = toy_cache(seed=3, batch=batch, vocab=vocab, scale=1.0)
  max_lens = np.array([10, 3, 7, 1, 10, 5])
  greedy_tokens, greedy_log_prob = beam_search.greedy_search(
      toy_step, cache, max_len=max_len, max_lens=max_lens)
  beam_tokens, beam_scores = beam_search.beam_search(
      toy_step, cache, beam_size=1, alpha=0.0, max_len=max_len, max_lens=max_lens)
  np.testing.assert_array_equal(beam_tokens[:, 0], greedy_tokens)
  np.testing.assert_allclose(beam_scores[:, 0], greedy_log_prob, rtol=1e-5)
  check_well_formed(np.asarray(greedy_tokens), max_lens)
  # Greedy really is the argmax at every step.
  table = np.asarray(cache["table"])
  for b in range(batch):
    row = np.asarray(greedy_tokens[b])
    for i in range(len(strip_eos(row)) + 1):
      if i < len(row) and row[i]:
        assert row[i] == np.argmax(toy_log_probs(table[b], list(row[:i])))


def test_finished_hypotheses_never_extend():
  vocab, max_len, batch = 6, 12, 3

  def eos_then_free_words(cache, tokens, position):
    # EOS is likely at first; after an EOS, token 3 would cost nothing, so a
    # search that extended finished hypotheses would prefer "EOS 3 3 3 ..." (the
    # length penalty rewards length).
    logits = jnp.where(tokens[:, None] == EOS_ID,
                       jnp.array([0, 0, 0, 50.0, 0, 0]), cache["logits"])
    return logits, cache

  cache = {"logits": jnp.tile(jnp.array([0, 2.0, 0, 0, 1.0, 0.5]), (batch, 1))}
  tokens, scores = beam_search.beam_search(eos_then_free_words, cache, beam_size=4, alpha=2.0,
                                      max_len=max_len, n_best=4, min_len=0)
  check_well_formed(tokens, np.full(batch, max_len))
  assert np.any(np.asarray(tokens)[:, :, 0] == EOS_ID)  # the trap was reachable
  assert np.all(np.isfinite(scores)) and np.all(scores > NEG_INF / 2)


def test_sentences_stop_early_and_respect_their_own_maximum():
  calls = []

  def almost_always_eos(cache, tokens, position):
    jax.debug.callback(lambda p: calls.append(int(p)), position)
    return jnp.tile(jnp.array([0, 30.0, 0, 0]), (tokens.shape[0], 1)), cache

  cache = {"dummy": jnp.zeros((2, 1))}
  for min_len in (0, 1, 3):
    calls.clear()
    tokens, _ = jax.jit(functools.partial(beam_search.beam_search, almost_always_eos,
                                          beam_size=4, alpha=0.0, max_len=30,
                                          min_len=min_len))(cache)
    jax.block_until_ready(tokens)
    jax.effects_barrier()
    # EOS finished right after min_len tokens and nothing alive can beat it.
    assert calls == list(range(min_len + 1)), min_len
    np.testing.assert_array_equal(np.asarray(tokens)[:, 0, min_len], EOS_ID)
    assert np.all(np.asarray(tokens)[:, 0, :min_len] > EOS_ID)

  def never_eos(cache, tokens, position):
    return jnp.tile(jnp.array([0, -30.0, 1.0, 0]), (tokens.shape[0], 1)), cache

  max_lens = np.array([5, 1, 8])
  tokens, _ = beam_search.beam_search(never_eos, {"dummy": jnp.zeros((3, 1))}, beam_size=2,
                                 max_len=8, max_lens=max_lens)
  lengths = (np.asarray(tokens)[:, 0] != 0).sum(-1)
  np.testing.assert_array_equal(lengths, max_lens)


def test_bad_arguments_raise():
  cache = toy_cache(seed=0, batch=1, vocab=4)
  with pytest.raises(ValueError, match="alpha=-1"):
    beam_search.beam_search(toy_step, cache, alpha=-1.0, max_len=3)
  with pytest.raises(ValueError, match="n_best=5"):
    beam_search.beam_search(toy_step, cache, beam_size=4, n_best=5, max_len=3)
  with pytest.raises(ValueError, match="increasing"):
    beam_search.beam_search(toy_step, cache, chunks=[4, 2], max_len=8)


def test_first_step_runs_one_row_per_sentence_then_one_per_beam():
  rows_seen = []

  def recording_step(cache, tokens, position):
    rows_seen.append(tokens.shape[0])                                  # at trace time
    return toy_step(cache, tokens, position)

  # Correctness of the first step is the exhaustive-search tests' business.
  beam_search.beam_search(recording_step, toy_cache(3, 2, 9), beam_size=3, alpha=0.6, max_len=5)
  assert rows_seen == [2, 6]                                           # before and in the loop


def test_two_stage_top_k_equals_one_top_k_over_beam_times_vocab():
  # Integer-valued log-probabilities make many ties; 3 words < 2k = 8 per beam.
  rng = np.random.default_rng(0)
  for vocab, beams in ((50, 4), (3, 4), (7, 1)):
    log_probs = jnp.asarray(rng.integers(-4, 0, (5, beams, vocab)), jnp.float32)
    alive_log_prob = jnp.asarray(rng.integers(-3, 1, (5, beams)), jnp.float32)
    alive_ok = jnp.asarray(rng.random((5, beams)) < 0.8)
    state = beam_search.BeamState(*[None] * 3, alive_log_prob, alive_ok, *[None] * 5)
    n = min(8, beams * vocab)
    beam_best = jax.lax.top_k(log_probs, min(n, vocab))
    top_log_prob, top_beam, top_token = beam_search._top_extensions(*beam_best, state, n)  # pylint: disable=protected-access
    candidates = jnp.where(alive_ok[..., None], alive_log_prob[..., None] + log_probs,
                           NEG_INF).reshape(5, beams * vocab)
    want_log_prob, want_index = jax.lax.top_k(candidates, n)
    np.testing.assert_array_equal(top_log_prob, want_log_prob)
    np.testing.assert_array_equal(top_beam, want_index // vocab)
    np.testing.assert_array_equal(top_token, want_index % vocab)


def _logits(rng, rows, vocab, ties):
  x = rng.integers(-3, 2, (rows, vocab)) if ties else rng.normal(size=(rows, vocab)) * 3
  return jnp.asarray(x, jnp.float32)


def test_best_equals_top_k_of_the_log_probs_in_both_layouts():
  rng = np.random.default_rng(0)
  # 37000 takes the blocked top-k; integer logits make ties, which go to the lower id.
  for rows, vocab, n, ties in ((6, 37000, 8, False), (6, 37000, 8, True), (5, 40, 8, True)):
    x = _logits(rng, rows, vocab, ties)
    want = jax.lax.top_k(beam_search.next_log_probs(x), n)
    for logits in (x, logits_lib.VocabMajor(x.T)):
      values, tokens = jax.jit(beam_search.best_tokens, static_argnums=1)(logits, n)
      np.testing.assert_array_equal(tokens, want[1])
      np.testing.assert_allclose(values, want[0], rtol=1e-6, atol=1e-5)
      assert not np.any(np.asarray(tokens) == PAD_ID)


def test_padding_only_when_nothing_else_is_left_and_then_at_neg_inf():
  x = jnp.asarray([[5.0, 0.0, 1.0], [9.0, 2.0, -1.0]])               # padding scores best
  for logits in (x, logits_lib.VocabMajor(x.T)):
    values, tokens = beam_search.best_tokens(logits, 3)
    np.testing.assert_array_equal(tokens, [[2, 1, PAD_ID], [1, 2, PAD_ID]])
    assert np.all(np.asarray(values)[:, 2] == NEG_INF)
    # The normaliser still counts padding's probability, as log_probs does.
    np.testing.assert_allclose(values[:, :2], jnp.take_along_axis(
        beam_search.next_log_probs(x), tokens[:, :2], axis=1), rtol=1e-6)


def test_log_probs_read_either_layout():
  x = _logits(np.random.default_rng(1), 4, 30, False)
  np.testing.assert_array_equal(logits_lib.row_major(logits_lib.VocabMajor(x.T)), x)
  np.testing.assert_allclose(beam_search.next_log_probs(logits_lib.VocabMajor(x.T)),
                             beam_search.next_log_probs(x), rtol=1e-6)
  log_probs = np.asarray(beam_search.next_log_probs(x))
  assert np.all(log_probs[:, PAD_ID] == NEG_INF)
  np.testing.assert_allclose(np.exp(log_probs[:, 1:]).sum(1), 1 - jax.nn.softmax(x)[:, PAD_ID],
                             rtol=1e-5)
