"""The compiled programs on a tiny model: chunks and shared cross-attention change nothing, an
ensemble of copies is the model, samples are seeded per sentence, a run field compiles no
decoding program again, and the warm-up leaves nothing to compile."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import monitoring

import tiny
from formats import check_well_formed
from t2t_jax.data import shortlist as shortlist_lib
from t2t_jax.decoding import alignment
from t2t_jax.decoding import beam_search
from t2t_jax.decoding import ensemble
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import search as search_lib
from t2t_jax.ids import EOS_ID, FILLER, PAD_ID
from t2t_jax.kernels import logits as logits_lib
from t2t_jax.model import transformer
from t2t_jax.runtime import stored_programs

TINY = tiny.TINY


@pytest.fixture(scope="module")
def member():
  return ensemble.Member(TINY.model, tiny.params(peaked=True))


def _inputs(seed, lengths):
  return tiny.rows(tiny.sources(seed, lengths))


def test_two_identical_members_search_like_one(member):
  # One member's step function is the model's own; two average their probabilities.
  inputs = _inputs(0, [7, 3, 0, 5])
  search = search_lib.Search.from_config(TINY, n_best=2)
  tokens, scores = batch_decoder.decode_batch([member], inputs, search)
  assert tokens.shape[:2] == scores.shape == (4, 2)
  assert (tokens[:, 0] != 0).sum(1).max() > 2  # the model says more than EOS
  pair_tokens, pair_scores = batch_decoder.decode_batch([member, member], inputs, search)
  np.testing.assert_array_equal(pair_tokens, tokens)
  np.testing.assert_allclose(pair_scores, scores, rtol=1e-5)
  with pytest.raises(ValueError, match="cached=False"):
    batch_decoder.decode_batch([member, member], inputs, search, cached=False)


def test_samples_are_sorted_reproducible_and_independent_of_the_batch(member):
  inputs = _inputs(1, [6, 2, 5, 4])
  search = search_lib.Search.from_config(TINY, sample=True, n_best=3, seed=5)
  tokens, scores = batch_decoder.decode_batch([member], inputs, search, ids=[10, 11, 12, 13])
  assert tokens.shape[:2] == scores.shape == (4, 3)
  assert np.all(np.diff(scores, axis=1) <= 0)
  assert len({tuple(t) for t in tokens.reshape(12, -1)}) > 4  # samples, not copies
  order = [2, 0, 3, 1]
  moved, moved_scores = batch_decoder.decode_batch([member], inputs[order], search,
                                              ids=[12, 10, 13, 11])
  np.testing.assert_array_equal(moved, tokens[order])
  np.testing.assert_allclose(moved_scores, scores[order], rtol=1e-6)
  other, _ = batch_decoder.decode_batch([member], inputs, dataclasses.replace(search, seed=6),
                                   ids=[10, 11, 12, 13])
  assert not np.array_equal(other, tokens)


def test_top_1_samples_are_the_greedy_output(member):
  inputs = _inputs(2, [5, 3])
  greedy, _ = batch_decoder.decode_batch([member], inputs,
                                    search_lib.Search.from_config(TINY, beam_size=1, alpha=0.0))
  samples, _ = batch_decoder.decode_batch(
      [member], inputs, search_lib.Search.from_config(TINY, sample=True, top_k=1, n_best=2))
  np.testing.assert_array_equal(samples, np.repeat(greedy, 2, axis=1))


def test_shared_and_chunked_searches_equal_the_tiled_reference(monkeypatch):
  """Cross-attention shared by the beams and a cache grown in chunks change nothing."""
  params = tiny.params()
  inputs = jnp.asarray(tiny.rows(tiny.sources(2, [7, 3, 0, 5])))
  max_len = 14
  max_lens = jnp.array([14, 10, 7, 12])  # source length (EOS included) + 6, as decode_batch

  @functools.partial(jax.jit, static_argnames=("shared", "chunks"))
  def search(inputs, shared, chunks):
    cache = transformer.init_cache(TINY.model, params, inputs, max_len)
    return beam_search.beam_search(functools.partial(transformer.decode_step, TINY.model, params),
                                   cache, beam_size=3, alpha=0.6, max_len=max_len,
                                   max_lens=max_lens, n_best=3, chunks=chunks, shared=shared)

  ref_tokens, ref_scores = search(inputs, shared=False, chunks=None)
  check_well_formed(ref_tokens, np.asarray(max_lens))
  for shared, chunks in ((True, None), (True, (2, 4, 8))):
    tokens, scores = search(inputs, shared=shared, chunks=chunks)
    np.testing.assert_array_equal(tokens, ref_tokens)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5)
  # decode_batch runs the chunks as programs of their own: the same again.
  monkeypatch.setattr(batch_decoder, "chunk_lengths", lambda max_len: [2, 4, 8, max_len])
  tokens, scores = batch_decoder.decode_batch([ensemble.Member(TINY.model, params)], inputs,
                                         search_lib.Search.from_config(TINY, n_best=3))
  np.testing.assert_array_equal(tokens, ref_tokens)
  np.testing.assert_allclose(scores, ref_scores, rtol=1e-5)


def test_a_run_field_compiles_no_decoding_program_again(member, monkeypatch):
  """Decoding programs take cfg.model: configs differing in a training field share them."""
  # _run runs too
  monkeypatch.setattr(batch_decoder, "chunk_lengths", lambda max_len: [2, 4, max_len])
  # pylint: disable=protected-access
  compiled_programs = {"_start": batch_decoder._start, "_run": batch_decoder._run,
                       "_sample": batch_decoder._sample,
                       "_cross_attention": alignment._cross_attention}
  inputs = _inputs(4, [5, 2])

  def decode_all(cfg):
    one = ensemble.Member(cfg.model, member.params)
    batch_decoder.decode_batch([one], inputs, search_lib.Search.from_config(cfg))
    batch_decoder.decode_batch([one], inputs,
                               search_lib.Search.from_config(cfg, sample=True, n_best=2))
    alignment.cross_attention(cfg.model, member.params, inputs, inputs)
    return {name: program._cache_size() for name, program in compiled_programs.items()}

  compiled = decode_all(TINY)
  assert all(compiled.values()), compiled  # the counts see the programs compiled so far
  assert decode_all(TINY.replace(eval_every_steps=7, num_train_steps=11, seed=3)) == compiled


def test_compile_beam_programs_leaves_nothing_to_compile_for_a_batch_of_its_shape(member,
                                                                                 monkeypatch):
  """What a server's warm-up relies on: every chunk's program, though it decodes nothing."""
  monkeypatch.setattr(batch_decoder, "chunk_lengths", lambda max_len: [2, 4, max_len])  # 3 programs
  jax.clear_caches()   # programs earlier tests compiled would hide one it misses
  beam_programs = (batch_decoder._start, batch_decoder._run)  # pylint: disable=protected-access
  inputs = _inputs(4, [5, 2])
  search = search_lib.Search.from_config(TINY)
  assert batch_decoder.compile_beam_programs([member], *inputs.shape, search) == 3
  compiled = [program._cache_size() for program in beam_programs]
  tokens, _ = batch_decoder.decode_batch([member], inputs, search)
  assert (tokens[:, 0] != 0).sum(1).max() > 4       # the search ran past the chunks at 2 and 4
  assert [program._cache_size() for program in beam_programs] == compiled


def test_stored_programs_decode_as_compiled_ones_and_are_loaded_not_compiled(member, tmp_path,
                                                                            monkeypatch):
  """What t2t-translate relies on: a new process loads every decoding program from the store."""
  # _run runs too
  monkeypatch.setattr(batch_decoder, "chunk_lengths", lambda max_len: [2, 4, max_len])
  inputs = _inputs(4, [5, 2, 7])
  beam = search_lib.Search.from_config(TINY, n_best=2)
  sample = search_lib.Search.from_config(TINY, sample=True, n_best=2, seed=3)
  expected = [batch_decoder.decode_batch([member], inputs, s) for s in (beam, sample)]
  first = stored_programs.Store(tmp_path)
  for search, (tokens, scores) in zip((beam, sample), expected):
    got = batch_decoder.decode_batch([member], inputs, search, store=first)
    np.testing.assert_array_equal(got[0], tokens)
    np.testing.assert_allclose(got[1], scores, rtol=1e-6)
  assert first.compiled == 4 and first.loaded == 0     # _start, _run twice, _sample
  traced = []
  monitoring.register_event_duration_secs_listener(
      lambda event, duration, fun_name="", **kw: traced.append(fun_name)
      if event == "/jax/core/compile/jaxpr_trace_duration" else None)
  jax.clear_caches()
  second = stored_programs.Store(tmp_path)               # as a new process would
  for search, (tokens, scores) in zip((beam, sample), expected):
    got = batch_decoder.decode_batch([member], inputs, search, store=second)
    np.testing.assert_array_equal(got[0], tokens)
    np.testing.assert_allclose(got[1], scores, rtol=1e-6)
  assert (second.compiled, second.loaded) == (0, 4)
  assert traced and not {"_start", "_run", "_sample"} & set(traced), traced


# ------------------------------------------------------------------ shortlists


def _beam(step_fn, cache, max_len, max_lens=None):
  return jax.jit(functools.partial(beam_search.beam_search, step_fn, beam_size=TINY.beam_size,
                                   alpha=TINY.alpha, max_len=max_len, n_best=2))(
                                       cache, max_lens=max_lens)


def _masked_step(member, listed):
  """The whole vocabulary's step with every id outside `listed` masked: the reference."""
  full = ensemble.step_function([member])
  keep = jnp.asarray(np.isin(np.arange(TINY.vocab_size), listed))

  def step(cache, tokens, position):
    logits, cache = full(cache, tokens, position)
    return jnp.where(keep, logits_lib.row_major(logits), -jnp.inf), cache
  return step


def test_a_shortlist_of_every_id_searches_as_the_whole_vocabulary(member):
  inputs = _inputs(4, [7, 3, 5, 6])
  cache, full = ensemble.init_decoder([member], inputs, 12)
  everything = ensemble.step_function([member], jnp.arange(TINY.vocab_size, dtype=jnp.int32))
  want, got = _beam(full, cache, 12), _beam(everything, cache, 12)
  np.testing.assert_array_equal(got[0], want[0])
  np.testing.assert_array_equal(got[1], want[1])


def test_a_shortlist_searches_as_the_whole_vocabulary_with_the_others_masked(member):
  inputs = _inputs(5, [7, 3, 5, 6])
  cache, _ = ensemble.init_decoder([member], inputs, 12)
  rng = np.random.default_rng(0)
  for listed in (np.arange(1, TINY.vocab_size),                     # all but padding
                 np.sort(rng.choice(np.arange(3, TINY.vocab_size), 9, replace=False))):
    listed = np.union1d(listed, shortlist_lib.ALWAYS).astype(np.int32)
    ids = np.concatenate([listed, np.full(4, FILLER, np.int32)])    # filler rows too
    want = _beam(_masked_step(member, listed), cache, 12)
    got = _beam(ensemble.step_function([member], jnp.asarray(ids)), cache, 12)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5)
    assert set(np.unique(got[0])) <= {PAD_ID, *listed}


def _table(per_source, frequent=()):
  """A Shortlist over TINY's vocabulary from {source id: [target ids]}."""
  width = max([len(v) for v in per_source.values()] + [1])
  table = np.full((TINY.vocab_size, width), FILLER, np.int32)
  for source, targets in per_source.items():
    table[source, :len(targets)] = targets
  return shortlist_lib.Shortlist(table, np.asarray(frequent, np.int32))


def test_decode_batch_picks_among_the_batch_candidates_only(member):
  inputs = _inputs(6, [7, 3, 5, 6])
  search = search_lib.Search.from_config(TINY, n_best=2)
  sources = sorted(set(np.unique(inputs)) - {PAD_ID, EOS_ID})
  table = _table({s: [(s * 7) % 21 + 3] for s in sources}, frequent=[5, 9])
  listed = table.candidates(inputs)
  assert EOS_ID in listed and PAD_ID not in listed
  assert len(table.batch_ids(inputs)) > len(listed)                # padded with filler
  tokens, scores = batch_decoder.decode_batch([member], inputs, search, shortlist=table)
  assert set(np.unique(tokens)) <= {PAD_ID, *listed}
  _, max_len, max_lens = search_lib.checked_limits(inputs, search, TINY.max_len)
  cache, _ = ensemble.init_decoder([member], inputs, max_len)
  want = _beam(_masked_step(member, listed), cache, max_len, max_lens)
  np.testing.assert_array_equal(tokens, want[0])
  np.testing.assert_allclose(scores, want[1], rtol=1e-5)
  # Sampling and ensembles read the shortlist's logits row-major.
  for members, settings in (([member], dict(sample=True, n_best=2)), ([member, member], {})):
    tokens, _ = batch_decoder.decode_batch(members, inputs, search_lib.Search.from_config(
        TINY, **settings), shortlist=table)
    assert set(np.unique(tokens)) <= {PAD_ID, *listed}
  with pytest.raises(ValueError, match="shortlist"):
    batch_decoder.decode_batch([member], inputs, search, cached=False, shortlist=table)
