"""inference/scoring.py: each target piece's log-probability, teacher-forced, against the model's
own forward pass; an ensemble's as its search's distribution; batches, parts and refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t2t_jax import configs
from t2t_jax.decoding import batch_decoder
from t2t_jax.ids import EOS_ID
from t2t_jax.inference import scoring
from t2t_jax.model import transformer

# A target vocabulary of its own (as imported separate vocabularies), an output bias.
CFG = configs.get_config("demo", vocab_size=24, num_layers=1, d_model=16, d_ff=32, num_heads=2,
                         max_len=24, embeddings="tied_output", target_vocab_size=29,
                         output_bias=True)


@pytest.fixture(scope="module")
def members():
  """Two models of the same vocabularies, their output biases off 0."""
  made = []
  for seed in (0, 1):
    params = transformer.init_params(CFG.model, jax.random.key(seed))
    params["output_bias"] = params["output_bias"] + 0.5 * jax.random.normal(
        jax.random.key(seed + 7), params["output_bias"].shape)
    made.append(batch_decoder.Member(CFG.model, params))
  return made


def _pairs(count, seed):
  """EOS-terminated sources (ids < 24) and targets (ids < 29) of 1..20 pieces; target 0 EOS alone."""
  rng = np.random.default_rng(seed)
  make = lambda vocab: [*rng.integers(3, vocab, rng.integers(0, 20)), EOS_ID]
  sources = [make(24) for _ in range(count)]
  targets = [[EOS_ID]] + [make(29) for _ in range(count - 1)]
  return sources, targets


def _padded(rows):
  out = np.zeros((len(rows), max(map(len, rows))), np.int32)
  for r, row in enumerate(rows):
    out[r, :len(row)] = row
  return out


def _reference(member, sources, targets):
  """log softmax of the model's own logits (its forward pass, one batch), at the target ids."""
  inputs, outputs = _padded(sources), _padded(targets)
  logits = jax.jit(transformer.Transformer(member.cfg).apply)(
      {"params": member.params}, inputs, outputs)
  gold = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits)), outputs[..., None],
                            axis=-1)[..., 0]
  return [gold[k, :len(target)] for k, target in enumerate(targets)]


def test_each_piece_is_its_log_probability_under_the_model_in_input_order(members, monkeypatch):
  sources, targets = _pairs(11, seed=0)
  found = scoring.score_ids(members[:1], sources, targets, batch_size=4)
  assert [len(f) for f in found] == [len(t) for t in targets] and len(found[0]) == 1
  for log_p, want in zip(found, _reference(members[0], sources, targets)):
    np.testing.assert_allclose(log_p, want, atol=2e-5)
    assert log_p.dtype == np.float32 and np.all(log_p < 0)
  # A batch whose logits pass the budget runs in parts of fewer rows: the same numbers.
  monkeypatch.setattr(scoring, "LOGITS_BUDGET", 2 * 32 * 29)
  again = scoring.score_ids(members[:1], sources, targets, batch_size=8)
  for a, b in zip(found, again):
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_an_ensemble_scores_each_piece_by_the_mean_of_its_probabilities(members):
  sources, targets = _pairs(5, seed=1)
  each = [scoring.score_ids([m], sources, targets) for m in members]
  both = scoring.score_ids(members, sources, targets)
  for k, log_p in enumerate(both):
    np.testing.assert_allclose(log_p, np.log((np.exp(each[0][k]) + np.exp(each[1][k])) / 2),
                               atol=2e-5)
  # A model with itself is the model.
  same = scoring.score_ids([members[0], members[0]], sources, targets)
  for a, b in zip(same, each[0]):
    np.testing.assert_allclose(a, b, atol=2e-6)


def test_a_pair_longer_than_the_positions_and_other_vocabularies_are_refused(members):
  sources, targets = _pairs(3, seed=2)
  targets[2] = [5] * 24 + [EOS_ID]
  with pytest.raises(ValueError, match=r"^line 3: its target has 25 pieces with EOS, more than "
                                       r"the model's 24 positions; shorten that pair or leave "
                                       r"it out"):
    scoring.score_ids(members, sources, targets)
  other = batch_decoder.Member(CFG.replace(target_vocab_size=30).model, members[0].params)
  with pytest.raises(ValueError, match=r"vocabulary sizes \(source, target\) \[\(24, 29\), "
                                       r"\(24, 30\)\]"):
    scoring.score_ids([members[0], other], sources[:2], targets[:2])
  with pytest.raises(ValueError, match="3 sources but 2 targets"):
    scoring.score_ids(members, sources, targets[:2])


def test_a_line_holds_the_sum_then_each_piece_with_six_decimals():
  log_p = np.asarray([-0.5, -1.25, -0.0000004], np.float32)
  assert scoring.format_line(log_p) == "-1.750000"
  assert scoring.format_line(log_p, per_token=True) == "-1.750000\t-0.500000 -1.250000 -0.000000"
  assert scoring.total(log_p) == pytest.approx(-1.7500004)
