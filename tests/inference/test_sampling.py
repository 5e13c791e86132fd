"""Sampling on toy step functions: top-1 is greedy, seeds reproduce, top-k and temperature hold."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from formats import check_well_formed
from t2t_jax.decoding import beam_search
from t2t_jax.inference import sampling
from t2t_jax.ids import EOS_ID, PAD_ID


def prefix_step(cache, tokens, position):
  """Logits depend on the whole prefix (through a running hash), as a decoder's do."""
  h = (cache["h"] * 7 + tokens * 3 + position + 1) % cache["table"].shape[1]
  logits = jnp.take_along_axis(cache["table"], h[:, None, None], axis=1)[:, 0]
  return logits, {**cache, "h": h}


def prefix_cache(seed, batch, vocab, states=97, scale=2.0):
  table = scale * jax.random.normal(jax.random.key(seed), (batch, states, vocab))
  return {"h": jnp.zeros((batch,), jnp.int32), "table": table}


def position_step(cache, tokens, position):
  """Logits of row b at `position` are table[b, position], whatever came before."""
  return jax.lax.dynamic_index_in_dim(cache["table"], position, axis=1, keepdims=False), cache


@functools.partial(jax.jit, static_argnames=("step_fn", "max_len", "temperature", "top_k",
                                             "min_len"))
def jit_sample(step_fn, cache, keys, max_lens, *, max_len, temperature=1.0, top_k=0,
               min_len=beam_search.MIN_LEN):
  return sampling.sample(step_fn, cache, keys, max_len=max_len, max_lens=max_lens,
                         temperature=temperature, top_k=top_k, min_len=min_len)


def keys_for(seed, batch):
  return sampling.row_keys(jax.random.key(seed), np.arange(batch))


def test_top_1_is_greedy():
  batch, max_len = 6, 10
  cache = prefix_cache(seed=1, batch=batch, vocab=12)
  max_lens = np.array([10, 3, 7, 1, 10, 5])
  greedy, greedy_log_prob = beam_search.greedy_search(prefix_step, cache, max_len=max_len,
                                                      max_lens=max_lens)
  for seed in (0, 1):
    tokens, log_prob = jit_sample(prefix_step, cache, keys_for(seed, batch), max_lens,
                                  max_len=max_len, temperature=0.7, top_k=1)
    np.testing.assert_array_equal(tokens, greedy)
    np.testing.assert_allclose(log_prob, greedy_log_prob, rtol=1e-6)
  check_well_formed(greedy, max_lens)


def test_same_keys_same_samples_other_keys_other_samples_and_rows_are_independent():
  batch, max_len = 8, 12
  cache = prefix_cache(seed=2, batch=batch, vocab=10, scale=1.0)
  max_lens = np.full(batch, max_len)
  first, first_lp = jit_sample(prefix_step, cache, keys_for(0, batch), max_lens, max_len=max_len)
  again, again_lp = jit_sample(prefix_step, cache, keys_for(0, batch), max_lens, max_len=max_len)
  other, _ = jit_sample(prefix_step, cache, keys_for(1, batch), max_lens, max_len=max_len)
  np.testing.assert_array_equal(first, again)
  np.testing.assert_array_equal(first_lp, again_lp)
  assert (np.asarray(first) != np.asarray(other)).any(axis=1).sum() >= batch // 2
  check_well_formed(first, max_lens)
  # A sentence keeps its sample when decoded in another row (same shapes: no new compile).
  order = np.random.default_rng(0).permutation(batch)
  moved = jax.tree.map(lambda x: x[order], cache)
  keys = sampling.row_keys(jax.random.key(0), order)
  tokens, log_prob = jit_sample(prefix_step, moved, keys, max_lens[order], max_len=max_len)
  np.testing.assert_array_equal(tokens, np.asarray(first)[order])
  np.testing.assert_allclose(log_prob, np.asarray(first_lp)[order], rtol=1e-6)


def test_the_score_is_the_model_log_probability_of_the_sample():
  batch, max_len, vocab = 4, 6, 7
  cache = {"table": 2.0 * jax.random.normal(jax.random.key(3), (batch, max_len, vocab))}
  tokens, log_prob = jit_sample(position_step, cache, keys_for(0, batch), np.full(batch, max_len),
                                max_len=max_len, temperature=1.7, top_k=3)
  # As in beam search: normalised over the whole vocabulary, padding then banned.
  table = np.asarray(cache["table"], np.float64)
  reference = table - np.log(np.exp(table).sum(-1, keepdims=True))
  for b, row in enumerate(np.asarray(tokens)):
    length = int(np.count_nonzero(row))
    expected = sum(reference[b, t, row[t]] for t in range(length))
    np.testing.assert_allclose(log_prob[b], expected, rtol=1e-5)


def test_only_the_top_k_tokens_are_drawn_and_never_padding():
  batch, max_len, vocab, k = 64, 8, 20, 3
  table = np.array(jax.random.normal(jax.random.key(4), (batch, max_len, vocab)))
  table[:, :, PAD_ID] = 5.0      # padding would be the favourite
  table[:, :, EOS_ID] = -5.0     # long samples: many draws to check
  cache = {"table": jnp.asarray(table)}
  tokens, _ = jit_sample(position_step, cache, keys_for(7, batch), np.full(batch, max_len),
                         max_len=max_len, temperature=3.0, top_k=k)
  tokens = np.asarray(tokens)
  check_well_formed(tokens, np.full(batch, max_len))
  allowed = table.copy()
  allowed[:, :, PAD_ID] = -np.inf
  top = np.argsort(-allowed, axis=-1)[:, :, :k]                       # [batch, max_len, k]
  drawn_ranks = set()
  for b in range(batch):
    for t in range(int(np.count_nonzero(tokens[b]))):
      assert tokens[b, t] in top[b, t], (b, t)
      drawn_ranks.add(int(np.flatnonzero(top[b, t] == tokens[b, t])[0]))
  assert drawn_ranks == set(range(k))  # not just the argmax


def test_temperature_shapes_the_distribution():
  # One step, one distribution, many independent rows: frequencies follow softmax(logits / T).
  rows, vocab = 4000, 5
  logits = np.array([0.0, -1.0, 1.0, 0.0, 0.5], np.float32)   # EOS (1) ends after one token
  cache = {"table": jnp.tile(jnp.asarray(logits), (rows, 1, 1))}
  for temperature, min_len in ((0.5, 0), (2.0, 0), (2.0, 1)):
    tokens, _ = jit_sample(position_step, cache, keys_for(0, rows), np.ones(rows, np.int32),
                           max_len=1, temperature=temperature, min_len=min_len)
    counts = np.bincount(np.asarray(tokens)[:, 0], minlength=vocab) / rows
    # Padding is never drawn, nor EOS before min_len tokens.
    banned = (np.arange(vocab) == PAD_ID) | ((np.arange(vocab) == EOS_ID) & (min_len > 0))
    scaled = np.where(banned, -np.inf, logits / temperature)
    expected = np.exp(scaled - scaled.max())
    np.testing.assert_allclose(counts, expected / expected.sum(), atol=0.03)


def test_bad_arguments_raise():
  cache = prefix_cache(seed=0, batch=2, vocab=4)
  with pytest.raises(ValueError, match="temperature=0"):
    sampling.sample(prefix_step, cache, keys_for(0, 2), max_len=3, temperature=0.0)
  with pytest.raises(ValueError, match="top_k=-1"):
    sampling.sample(prefix_step, cache, keys_for(0, 2), max_len=3, top_k=-1)
  with pytest.raises(ValueError, match=r"typed PRNG keys \[rows\]"):
    sampling.sample(prefix_step, cache, jax.random.PRNGKey(0), max_len=3)
