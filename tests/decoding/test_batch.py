"""The batch driver on a tiny model: cache == no cache, chunks and shared cross-attention change
nothing, input order is kept, an ensemble of copies is the model, samples are seeded per
sentence, and a run field compiles no decoding program again."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from formats import check_well_formed
from t2t_jax import configs
from t2t_jax.decoding import alignment
from t2t_jax.decoding import batch
from t2t_jax.decoding import beam_search
from t2t_jax.decoding import ensemble
from t2t_jax.ids import EOS_ID
from t2t_jax.model import transformer as model

TINY = configs.get_config("demo", vocab_size=24, num_layers=2, d_model=32, d_ff=64, num_heads=4,
                          max_len=32, max_decode_extra=6, beam_size=3, decode_batch_size=4)


@pytest.fixture(scope="module")
def member():
  params = model.init_params(TINY, jax.random.key(1))
  # Peaked distributions (logits x4 through the shared embedding): outputs longer than EOS.
  params["embedding"]["embedding"] = 4.0 * np.asarray(params["embedding"]["embedding"])
  return ensemble.Member(TINY, params)


def _inputs(seed, lengths, width=8):
  rng = np.random.default_rng(seed)
  inputs = np.zeros((len(lengths), width), np.int32)
  for row, n in enumerate(lengths):
    inputs[row, :n + 1] = [*rng.integers(3, TINY.vocab_size, n), EOS_ID]
  return inputs


def test_two_identical_members_search_like_one(member):
  # One member's step function is the model's own; two average their probabilities.
  inputs = _inputs(0, [7, 3, 0, 5])
  search = batch.Search.from_config(TINY, n_best=2)
  tokens, scores = batch.decode_batch([member], inputs, search)
  assert tokens.shape[:2] == scores.shape == (4, 2)
  assert (tokens[:, 0] != 0).sum(1).max() > 2  # the model says more than EOS
  pair_tokens, pair_scores = batch.decode_batch([member, member], inputs, search)
  np.testing.assert_array_equal(pair_tokens, tokens)
  np.testing.assert_allclose(pair_scores, scores, rtol=1e-5)
  with pytest.raises(ValueError, match="cached=False"):
    batch.decode_batch([member, member], inputs, search, cached=False)


def test_samples_are_sorted_reproducible_and_independent_of_the_batch(member):
  inputs = _inputs(1, [6, 2, 5, 4])
  search = batch.Search.from_config(TINY, sample=True, n_best=3, seed=5)
  tokens, scores = batch.decode_batch([member], inputs, search, ids=[10, 11, 12, 13])
  assert tokens.shape[:2] == scores.shape == (4, 3)
  assert np.all(np.diff(scores, axis=1) <= 0)
  assert len({tuple(t) for t in tokens.reshape(12, -1)}) > 4  # samples, not copies
  order = [2, 0, 3, 1]
  moved, moved_scores = batch.decode_batch([member], inputs[order], search,
                                              ids=[12, 10, 13, 11])
  np.testing.assert_array_equal(moved, tokens[order])
  np.testing.assert_allclose(moved_scores, scores[order], rtol=1e-6)
  other, _ = batch.decode_batch([member], inputs, dataclasses.replace(search, seed=6),
                                  ids=[10, 11, 12, 13])
  assert not np.array_equal(other, tokens)


def test_top_1_samples_are_the_greedy_output(member):
  inputs = _inputs(2, [5, 3])
  greedy, _ = batch.decode_batch([member], inputs,
                                    batch.Search.from_config(TINY, beam_size=1, alpha=0.0))
  samples, _ = batch.decode_batch(
      [member], inputs, batch.Search.from_config(TINY, sample=True, top_k=1, n_best=2))
  np.testing.assert_array_equal(samples, np.repeat(greedy, 2, axis=1))


def test_bad_settings_raise_with_what_to_do():
  with pytest.raises(ValueError, match="n_best=5 must be <= beam_size=4"):
    batch.Search(n_best=5)
  batch.Search(n_best=5, sample=True)  # samples are not limited by the beam
  with pytest.raises(ValueError, match="temperature=0"):
    batch.Search(sample=True, temperature=0)
  with pytest.raises(ValueError, match="n_best=0"):
    batch.Search(n_best=0)


# ------------------------------------------------------------------ one model


@pytest.fixture(scope="module")
def tiny_params():
  return model.init_params(TINY, jax.random.key(1))


def _random_sources(seed, lengths):
  rng = np.random.default_rng(seed)
  return [list(rng.integers(3, TINY.vocab_size, size=n)) for n in lengths]


def _batch(sources, width):
  inputs = np.zeros((len(sources), width), np.int32)
  for row, src in enumerate(sources):
    inputs[row, :len(src) + 1] = [*src, EOS_ID]
  return inputs


def test_cached_and_uncached_decoding_agree(tiny_params):
  inputs = _batch(_random_sources(0, [7, 3, 0, 5]), width=8)
  cached, cached_scores = batch.translate_batch(TINY, tiny_params, inputs)
  uncached, uncached_scores = batch.translate_batch(TINY, tiny_params, inputs, cached=False)
  np.testing.assert_array_equal(cached, uncached)
  np.testing.assert_allclose(cached_scores, uncached_scores, rtol=1e-4)
  # Input length (EOS included) + max_decode_extra bounds each sentence.
  check_well_formed(np.asarray(cached), (inputs != 0).sum(1) + TINY.max_decode_extra)
  assert cached.shape == (4, 1, 8 + TINY.max_decode_extra)


def test_decode_ids_restores_input_order(tiny_params):
  # Distinct lengths sort the same whatever the input order: the same batches of
  # 4 (the last padded with a filler row), compiled once with the test above.
  sources = _random_sources(1, [6, 2, 0, 4, 1, 5, 3])
  order = np.random.default_rng(0).permutation(len(sources))
  outputs = batch.decode_ids(TINY, tiny_params, sources)
  shuffled = batch.decode_ids(TINY, tiny_params, [sources[i] for i in order])
  assert shuffled == [outputs[i] for i in order]
  # Two batches decoding at once (the default) give what one at a time gives.
  assert batch.decode_ids(TINY, tiny_params, sources, in_flight=1) == outputs
  # Each sentence decoded on its own gives the same output.
  single = _batch([sources[2], sources[0], sources[1], sources[3]], width=8)
  tokens, _ = batch.translate_batch(TINY, tiny_params, single)
  assert [batch.strip_eos(t) for t in np.asarray(tokens[:, 0])] == \
      [outputs[2], outputs[0], outputs[1], outputs[3]]
  assert all(len(out) <= len(src) + 1 + TINY.max_decode_extra
             for src, out in zip(sources, outputs))
  with pytest.raises(ValueError, match="truncate"):
    batch.decode_ids(TINY, tiny_params, [[5] * TINY.max_len])


def test_source_rows_pad_to_the_bucket_of_the_longest_source():
  # 43 ids + EOS fit the bucket 48 (not the power of two 64); 3 rows round up to 4.
  rows = batch.source_rows([[5] * 43, [6] * 7, []], batch_size=64, max_len=128)
  assert rows.shape == (4, 48) and rows.dtype == np.int32
  assert rows[0, 42:45].tolist() == [5, EOS_ID, 0]
  assert rows[1, :9].tolist() == [6] * 7 + [EOS_ID, 0]
  assert rows[2, 0] == EOS_ID and not rows[3].any()          # the filler row is all padding
  assert batch.source_rows([[5] * 3], batch_size=64, max_len=128).shape == (1, 8)
  assert batch.source_rows([[5] * 90], batch_size=64, max_len=96).shape == (1, 96)
  assert batch.source_rows([[5]] * 17, batch_size=24, max_len=128).shape[0] == 24


def test_shared_and_chunked_searches_equal_the_tiled_reference(tiny_params, monkeypatch):
  """Cross-attention shared by the beams and a cache grown in chunks change nothing."""
  inputs = jnp.asarray(_batch(_random_sources(2, [7, 3, 0, 5]), width=8))
  max_len = 14
  max_lens = jnp.array([14, 10, 7, 12])  # source length (EOS included) + 6, as translate_batch

  @functools.partial(jax.jit, static_argnames=("shared", "chunks"))
  def search(inputs, shared, chunks):
    cache = model.init_cache(TINY, tiny_params, inputs, max_len)
    return beam_search.beam_search(functools.partial(model.decode_step, TINY, tiny_params), cache,
                              beam_size=3, alpha=0.6, max_len=max_len, max_lens=max_lens,
                              n_best=3, chunks=chunks, shared=shared)

  ref_tokens, ref_scores = search(inputs, shared=False, chunks=None)
  check_well_formed(ref_tokens, np.asarray(max_lens))
  for shared, chunks in ((True, None), (True, (2, 4, 8))):
    tokens, scores = search(inputs, shared=shared, chunks=chunks)
    np.testing.assert_array_equal(tokens, ref_tokens)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5)
  # translate_batch runs the chunks as programs of their own: the same again.
  monkeypatch.setattr(batch, "chunk_lengths", lambda max_len: [2, 4, 8, max_len])
  tokens, scores = batch.translate_batch(TINY, tiny_params, inputs, max_decode_extra=6, n_best=3)
  np.testing.assert_array_equal(tokens, ref_tokens)
  np.testing.assert_allclose(scores, ref_scores, rtol=1e-5)


def test_a_run_field_compiles_no_decoding_program_again(member, monkeypatch):
  """Decoding programs take cfg.model: configs differing in a training field share them."""
  monkeypatch.setattr(batch, "chunk_lengths", lambda max_len: [2, 4, max_len])  # _run runs too
  # pylint: disable=protected-access
  programs = {"_start": batch._start, "_run": batch._run, "_sample": batch._sample,
              "_cross_attention": alignment._cross_attention}
  inputs = _inputs(4, [5, 2])

  def decode_all(cfg):
    one = ensemble.Member(cfg, member.params)
    batch.decode_batch([one], inputs, batch.Search.from_config(cfg))
    batch.decode_batch([one], inputs, batch.Search.from_config(cfg, sample=True, n_best=2))
    alignment.cross_attention(cfg, member.params, inputs, inputs)
    return {name: program._cache_size() for name, program in programs.items()}

  compiled = decode_all(TINY)
  assert all(compiled.values()), compiled  # the counts see the programs compiled so far
  assert decode_all(TINY.replace(eval_every_steps=7, num_train_steps=11, seed=3)) == compiled


def test_compile_beam_programs_leaves_nothing_to_compile_for_a_batch_of_its_shape(member,
                                                                                 monkeypatch):
  """What a server's warm-up relies on: every chunk's program, though it decodes nothing."""
  monkeypatch.setattr(batch, "chunk_lengths", lambda max_len: [2, 4, max_len])  # three programs
  jax.clear_caches()   # programs earlier tests compiled would hide one it misses
  programs = (batch._start, batch._run)  # pylint: disable=protected-access
  inputs = _inputs(4, [5, 2])
  search = batch.Search.from_config(TINY)
  assert batch.compile_beam_programs([member], *inputs.shape, search) == 3
  compiled = [program._cache_size() for program in programs]
  tokens, _ = batch.decode_batch([member], inputs, search)
  assert (tokens[:, 0] != 0).sum(1).max() > 4       # the search ran past the chunks at 2 and 4
  assert [program._cache_size() for program in programs] == compiled


def test_output_limits_are_a_times_the_source_plus_b():
  inputs = np.array([[5, 6, 1, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0], [4, 4, 4, 4, 1]])
  lengths = np.array([3, 1, 0, 5])
  max_len, limits = batch.output_limits(inputs, 50, 1.0, 512)
  assert max_len == 55 and list(limits) == [53, 51, 1, 55]       # ours: length + extra
  max_len, limits = batch.output_limits(inputs, 2, 1.5, 512)      # fairseq's a * n + b
  assert max_len == 10 and list(limits) == list(np.where(lengths, np.ceil(1.5 * lengths) + 2, 1))
  max_len, limits = batch.output_limits(inputs, 200, 0.0, 64)     # capped by the model
  assert max_len == 64 and list(limits) == [64, 64, 1, 64]
