"""decoding/batch_decoder.py: the search settings and output limits, ensembles (probabilities
averaged), and the compiled programs that decode one batch."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import monitoring

import tiny
from formats import check_well_formed
from t2t_jax import configs
from t2t_jax.inference import shortlist as shortlist_lib
from t2t_jax.inference import alignment
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import beam_search
from t2t_jax.inference import sampling
from t2t_jax.ids import EOS_ID, FILLER, PAD_ID
from t2t_jax.kernels import choice
from t2t_jax.kernels import logits as logits_lib
from t2t_jax.model import transformer
from t2t_jax.inference import stored_programs


TINY = tiny.TINY


def _decode(members, inputs, search, **settings):
  """Beam search's or sampling's decode_batch, as the search asks."""
  decode = sampling.decode_batch if search.sample else batch_decoder.decode_batch
  return decode(members, inputs, search, **settings)


@pytest.fixture(scope="module")
def member():
  return batch_decoder.Member(TINY.model, tiny.params(peaked=True))


def _inputs(seed, lengths):
  return tiny.rows(tiny.sources(seed, lengths))


def test_two_identical_members_search_like_one(member):
  # One member's step function is the model's own; two average their probabilities.
  inputs = _inputs(0, [7, 3, 0, 5])
  search = batch_decoder.Search.from_config(TINY, n_best=2)
  tokens, scores = _decode([member], inputs, search)
  assert tokens.shape[:2] == scores.shape == (4, 2)
  assert (tokens[:, 0] != 0).sum(1).max() > 2  # the model says more than EOS
  pair_tokens, pair_scores = _decode([member, member], inputs, search)
  np.testing.assert_array_equal(pair_tokens, tokens)
  np.testing.assert_allclose(pair_scores, scores, rtol=1e-5)


def test_samples_are_sorted_reproducible_and_independent_of_the_batch(member):
  inputs = _inputs(1, [6, 2, 5, 4])
  search = batch_decoder.Search.from_config(TINY, sample=True, n_best=3, seed=5)
  tokens, scores = _decode([member], inputs, search, ids=[10, 11, 12, 13])
  assert tokens.shape[:2] == scores.shape == (4, 3)
  assert np.all(np.diff(scores, axis=1) <= 0)
  assert len({tuple(t) for t in tokens.reshape(12, -1)}) > 4  # samples, not copies
  order = [2, 0, 3, 1]
  moved, moved_scores = _decode([member], inputs[order], search,
                                              ids=[12, 10, 13, 11])
  np.testing.assert_array_equal(moved, tokens[order])
  np.testing.assert_allclose(moved_scores, scores[order], rtol=1e-6)
  other, _ = _decode([member], inputs, dataclasses.replace(search, seed=6),
                                   ids=[10, 11, 12, 13])
  assert not np.array_equal(other, tokens)


def test_top_1_samples_are_the_greedy_output(member):
  inputs = _inputs(2, [5, 3])
  greedy, _ = _decode([member], inputs,
                                    batch_decoder.Search.from_config(TINY, beam_size=1, alpha=0.0))
  samples, _ = _decode(
      [member], inputs, batch_decoder.Search.from_config(TINY, sample=True, top_k=1, n_best=2))
  np.testing.assert_array_equal(samples, np.repeat(greedy, 2, axis=1))


@pytest.mark.exact
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
  tokens, scores = _decode([batch_decoder.Member(TINY.model, params)], inputs,
                                         batch_decoder.Search.from_config(TINY, n_best=3))
  np.testing.assert_array_equal(tokens, ref_tokens)
  np.testing.assert_allclose(scores, ref_scores, rtol=1e-5)


def test_a_run_field_compiles_no_decoding_program_again(member, monkeypatch):
  """Decoding programs take cfg.model: configs differing in a training field share them."""
  # _run runs too
  monkeypatch.setattr(batch_decoder, "chunk_lengths", lambda max_len: [2, 4, max_len])
  # pylint: disable=protected-access
  compiled_programs = {"_start": batch_decoder._start, "_run": batch_decoder._run,
                       "_sample": sampling._sample_batch,
                       "_cross_attention": alignment._cross_attention}
  inputs = _inputs(4, [5, 2])

  def decode_all(cfg):
    one = batch_decoder.Member(cfg.model, member.params)
    _decode([one], inputs, batch_decoder.Search.from_config(cfg))
    _decode([one], inputs,
                               batch_decoder.Search.from_config(cfg, sample=True, n_best=2))
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
  search = batch_decoder.Search.from_config(TINY)
  assert batch_decoder.compile_beam_programs([member], *inputs.shape, search) == 3
  compiled = [program._cache_size() for program in beam_programs]
  tokens, _ = _decode([member], inputs, search)
  assert (tokens[:, 0] != 0).sum(1).max() > 4       # the search ran past the chunks at 2 and 4
  assert [program._cache_size() for program in beam_programs] == compiled


def test_stored_programs_decode_as_compiled_ones_and_are_loaded_not_compiled(member, tmp_path,
                                                                            monkeypatch):
  """What t2t-translate relies on: a new process loads every decoding program from the store."""
  # _run runs too
  monkeypatch.setattr(batch_decoder, "chunk_lengths", lambda max_len: [2, 4, max_len])
  inputs = _inputs(4, [5, 2, 7])
  beam = batch_decoder.Search.from_config(TINY, n_best=2)
  sample = batch_decoder.Search.from_config(TINY, sample=True, n_best=2, seed=3)
  expected = [_decode([member], inputs, s) for s in (beam, sample)]
  first = stored_programs.Store(tmp_path)
  for search, (tokens, scores) in zip((beam, sample), expected):
    got = _decode([member], inputs, search, store=first)
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
    got = _decode([member], inputs, search, store=second)
    np.testing.assert_array_equal(got[0], tokens)
    np.testing.assert_allclose(got[1], scores, rtol=1e-6)
  assert (second.compiled, second.loaded) == (0, 4)
  assert traced and not {"_start", "_run", "_sample_batch"} & set(traced), traced


# ------------------------------------------------------------------ shortlists


def _beam(step_fn, cache, max_len, max_lens=None):
  return jax.jit(functools.partial(beam_search.beam_search, step_fn, beam_size=TINY.beam_size,
                                   alpha=TINY.alpha, max_len=max_len, n_best=2))(
                                       cache, max_lens=max_lens)


def _masked_step(member, listed):
  """The whole vocabulary's step with every id outside `listed` masked: the reference."""
  full = batch_decoder.step_function([member])
  keep = jnp.asarray(np.isin(np.arange(TINY.vocab_size), listed))

  def step(cache, tokens, position):
    logits, cache = full(cache, tokens, position)
    return jnp.where(keep, logits_lib.row_major(logits), -jnp.inf), cache
  return step


def _every_id(vocab_size):
  """The table `t2t-shortlist --frequent <vocab size>` writes where every piece occurs."""
  return shortlist_lib.Shortlist(np.full((vocab_size, 1), FILLER, np.int32),
                                 np.arange(3, vocab_size, dtype=np.int32))


@pytest.mark.exact
def test_a_table_of_every_id_decodes_exactly_as_the_whole_vocabulary(member):
  inputs = _inputs(4, [7, 3, 5, 6])
  table = _every_id(TINY.vocab_size)
  assert list(table.batch_ids(inputs)) == list(range(TINY.vocab_size))
  for members, settings in (([member], dict(n_best=3)), ([member, member], dict(n_best=2)),
                            ([member], dict(sample=True, n_best=2, seed=3))):
    search = batch_decoder.Search.from_config(TINY, **settings)
    want = _decode(members, inputs, search)
    got = _decode(members, inputs, search, shortlist=table)
    np.testing.assert_array_equal(got[0], want[0])
    # Bitwise equal on JAX 0.10.2 compiled as the commands compile; JAX 0.12's XLA fuses
    # the two step programs apart and rounds a score about 1e-6 apart, the suite's fast
    # compilation (tests/xla_flags.py) 2.1e-6. Padding left out of the normaliser moves them
    # by its probability (here over 1e-3), as the issue found (0.37).
    np.testing.assert_allclose(got[1], want[1], rtol=0, atol=5e-6)


def test_the_search_runs_in_the_lists_positions_and_never_returns_filler(member):
  # Fewer listed ids (padding aside) than the 2 x beam a step picks: filler positions
  # come up, score -inf, and never reach the model or the outputs as ids.
  inputs = _inputs(5, [7, 3, 5, 6])
  ids = jnp.asarray([PAD_ID, EOS_ID, 5, 9, FILLER, FILLER], jnp.int32)
  cache, _ = batch_decoder.init_decoder([member], inputs, 8)
  step = batch_decoder.step_function([member], ids)
  seen = []

  def spy(cache, tokens, position):
    jax.debug.callback(lambda t: seen.append(np.asarray(t)),
                       batch_decoder.vocabulary_ids(ids, tokens))
    return step(cache, tokens, position)
  positions, scores = _beam(spy, cache, 8)
  assert np.asarray(positions).max() < 4 and set(np.concatenate(seen)) <= {PAD_ID, EOS_ID, 5, 9}
  tokens = batch_decoder.vocabulary_ids(np.asarray(ids), np.asarray(positions))
  assert set(np.unique(tokens)) <= {PAD_ID, EOS_ID, 5, 9}
  assert np.all(np.isfinite(np.asarray(scores)[:, 0]))


def _table(per_source, frequent=()):
  """A Shortlist over TINY's vocabulary from {source id: [target ids]}."""
  width = max([len(v) for v in per_source.values()] + [1])
  table = np.full((TINY.vocab_size, width), FILLER, np.int32)
  for source, targets in per_source.items():
    table[source, :len(targets)] = targets
  return shortlist_lib.Shortlist(table, np.asarray(frequent, np.int32))


@pytest.mark.exact
def test_decode_batch_picks_among_the_batch_candidates_only(member):
  inputs = _inputs(6, [7, 3, 5, 6])
  search = batch_decoder.Search.from_config(TINY, n_best=2)
  sources = sorted(set(np.unique(inputs)) - {PAD_ID, EOS_ID})
  table = _table({s: [(s * 7) % 21 + 3] for s in sources}, frequent=[5, 9])
  listed = table.candidates(inputs)
  assert list(listed[:2]) == [PAD_ID, EOS_ID]                     # positions 0 and 1
  assert len(table.batch_ids(inputs)) > len(listed)                # padded with filler
  tokens, scores = _decode([member], inputs, search, shortlist=table)
  assert set(np.unique(tokens)) <= {PAD_ID, *listed}
  _, max_len, max_lens = batch_decoder.checked_limits(inputs, search, TINY.max_len)
  cache, _ = batch_decoder.init_decoder([member], inputs, max_len)
  want = _beam(_masked_step(member, listed), cache, max_len, max_lens)
  np.testing.assert_array_equal(tokens, want[0])
  np.testing.assert_allclose(scores, want[1], rtol=1e-5)
  # Sampling and ensembles read the shortlist's logits row-major.
  for members, settings in (([member], dict(sample=True, n_best=2)), ([member, member], {})):
    tokens, _ = _decode(members, inputs, batch_decoder.Search.from_config(
        TINY, **settings), shortlist=table)
    assert set(np.unique(tokens)) <= {PAD_ID, *listed}


def test_bad_settings_raise_with_what_to_do():
  with pytest.raises(ValueError, match="n_best=5 must be <= beam_size=4"):
    batch_decoder.Search(n_best=5)
  batch_decoder.Search(n_best=5, sample=True)  # samples are not limited by the beam
  with pytest.raises(ValueError, match="temperature=0"):
    batch_decoder.Search(sample=True, temperature=0)
  with pytest.raises(ValueError, match="n_best=0"):
    batch_decoder.Search(n_best=0)


def test_output_limits_are_a_times_the_source_plus_b():
  inputs = np.array([[5, 6, 1, 0, 0], [1, 0, 0, 0, 0], [0, 0, 0, 0, 0], [4, 4, 4, 4, 1]])
  lengths = np.array([3, 1, 0, 5])
  max_len, limits = batch_decoder.output_limits(inputs, 50, 1.0, 512)
  assert max_len == 55 and list(limits) == [53, 51, 1, 55]       # ours: length + extra
  max_len, limits = batch_decoder.output_limits(inputs, 2, 1.5, 512)      # fairseq's a * n + b
  assert max_len == 10 and list(limits) == list(np.where(lengths, np.ceil(1.5 * lengths) + 2, 1))
  max_len, limits = batch_decoder.output_limits(inputs, 200, 0.0, 64)     # capped by the model
  assert max_len == 64 and list(limits) == [64, 64, 1, 64]


def test_a_batch_longer_than_the_model_or_not_2d_is_refused():
  with pytest.raises(ValueError, match="truncate the sources first"):
    batch_decoder.checked_limits(np.ones((2, 40), np.int32), batch_decoder.Search(), positions=32)
  with pytest.raises(ValueError, match=r"\[batch, length\]"):
    batch_decoder.checked_limits(np.ones((8,), np.int32), batch_decoder.Search(), positions=32)


SMALL = configs.get_config("demo", vocab_size=24, num_layers=2, d_model=32, d_ff=64, num_heads=4,
                           max_len=32)
# Another shape, the same vocabulary: members need not match otherwise.
OTHER = SMALL.replace(num_layers=1, d_model=16, d_ff=32, num_heads=2)


@pytest.fixture(scope="module")
def members():
  return [batch_decoder.Member(SMALL.model, transformer.init_params(SMALL.model, jax.random.key(0))),
          batch_decoder.Member(OTHER.model, transformer.init_params(OTHER.model, jax.random.key(1)))]


def _ensemble_inputs():
  rng = np.random.default_rng(0)
  inputs = np.zeros((3, 8), np.int32)
  for row, n in enumerate((6, 2, 4)):
    inputs[row, :n + 1] = [*rng.integers(3, 24, n), EOS_ID]
  return jnp.asarray(inputs)


def _log_probs(members, inputs, prefix):
  """Log-probabilities [steps, rows, vocab] of the ensemble after each token of `prefix`.

  Not jitted: a few eager steps of tiny models cost less than compiling them.
  """
  cache, step_fn = batch_decoder.init_decoder(members, inputs, 8)
  out = []
  previous = jnp.zeros(inputs.shape[0], jnp.int32)
  for position in range(prefix.shape[1]):
    logits, cache = step_fn(cache, previous, jnp.int32(position))
    out.append(jax.nn.log_softmax(logits_lib.row_major(logits)))
    previous = prefix[:, position]
  return np.asarray(jnp.stack(out), np.float64)


def test_ensembles_average_the_models_probabilities(members):
  inputs = _ensemble_inputs()
  prefix = jnp.asarray(np.random.default_rng(1).integers(2, 24, (3, 2)), jnp.int32)
  first, second = (_log_probs([m], inputs, prefix) for m in members)
  both = _log_probs(members, inputs, prefix)
  np.testing.assert_allclose(np.exp(both), (np.exp(first) + np.exp(second)) / 2, atol=1e-6)
  np.testing.assert_allclose(np.exp(both).sum(-1), 1.0, atol=1e-5)
  twice = _log_probs([members[0], members[0]], inputs, prefix)
  np.testing.assert_allclose(twice, first, atol=1e-5)


def test_one_model_is_the_model_and_two_identical_models_search_like_one(members):
  inputs = _ensemble_inputs()
  cache, step_fn = batch_decoder.init_decoder(members[:1], inputs, 10)
  # One model's step function is the model's own decode_step, read vocabulary-major.
  cfg, params = members[0]
  tokens = jnp.asarray([5, 7, 9], jnp.int32)
  logits, _ = step_fn(cache, tokens, 0)
  want, _ = transformer.decode_step(cfg, params, cache, tokens, 0, choice.plugins(cfg))
  assert isinstance(logits, logits_lib.VocabMajor)
  np.testing.assert_allclose(logits_lib.row_major(logits), want, rtol=1e-6, atol=1e-6)
  search = functools.partial(beam_search.beam_search, beam_size=3, alpha=0.6, max_len=10, n_best=2)
  one_tokens, one_scores = search(step_fn, cache)
  pair_cache, pair_step = batch_decoder.init_decoder(members[:1] * 2, inputs, 10)
  pair_tokens, pair_scores = search(pair_step, pair_cache)
  np.testing.assert_array_equal(pair_tokens, one_tokens)
  np.testing.assert_allclose(pair_scores, one_scores, rtol=1e-5)


def test_members_must_share_the_vocabulary(members):
  bigger = SMALL.replace(vocab_size=32)
  odd = batch_decoder.Member(bigger.model, members[0].params)  # checked before any parameter is read
  with pytest.raises(ValueError, match=r"vocabulary sizes \(source, target\) \[\(24, 24\), "
                                       r"\(32, 32\)\]"):
    batch_decoder.init_decoder([members[0], odd], _ensemble_inputs(), 8)

  def step(width):
    return lambda cache, tokens, position: (jnp.zeros((tokens.shape[0], width)), cache)

  with pytest.raises(ValueError, match="different vocabulary sizes"):
    batch_decoder.ensemble_step([step(4), step(5)])(((), ()), jnp.zeros(2, jnp.int32), 0)
  with pytest.raises(ValueError, match="at least one model"):
    batch_decoder.ensemble_step([])


# A published model's options (an output bias) and a target vocabulary of its own (its
# embedding the output layer), beside the paper's.
PROJECTED = [SMALL, SMALL.replace(output_bias=True, embeddings="tied_output", attention_bias=True,
                                  target_vocab_size=SMALL.vocab_size + 5)]


@pytest.mark.exact
@pytest.mark.parametrize("cfg", PROJECTED, ids=["paper", "biases_unshared"])
def test_a_model_step_in_either_layout_is_its_teacher_forced_logits(cfg):
  params = transformer.init_params(cfg.model, jax.random.key(2))
  params = jax.tree_util.tree_map_with_path(   # biases off their initial 0
      lambda path, x: x + 0.3 if "bias" in getattr(path[-1], "key", "") else x, params)
  member = batch_decoder.Member(cfg.model, params)
  inputs = _ensemble_inputs()
  targets = jnp.asarray(np.random.default_rng(3).integers(3, 24, (3, 5)), jnp.int32)
  full = np.asarray(batch_decoder.teacher_forced_logits(member, inputs, targets))
  # The model's own forward pass: the float model's search projects as the model does.
  np.testing.assert_allclose(full, transformer.Transformer(cfg.model).apply(
      {"params": params}, inputs, targets), atol=2e-5)
  for layout in logits_lib.LAYOUTS:
    step = jax.jit(batch_decoder.model_step(member, layout))
    cache = transformer.init_cache(cfg.model, params, inputs, 5, choice.plugins(cfg.model))
    tokens = jnp.zeros((3,), jnp.int32)
    for position in range(targets.shape[1]):
      logits, cache = step(cache, tokens, position)
      assert isinstance(logits, logits_lib.VocabMajor) == (layout == "vocab_major")
      np.testing.assert_allclose(logits_lib.row_major(logits), full[:, position], atol=2e-5)
      tokens = targets[:, position]
