"""Our model beside an exported one: log-probabilities, and translations that are the same or tied.

Shared by tests/export/test_huggingface.py and test_ctranslate2.py (fixtures in
conftest.py). A translation that differs from ours must be a tie: our model
gives both the same score.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.ids import EOS_ID, PAD_ID
from t2t_jax.model import transformer

NUM_SENTENCES = 32
TIE = 1e-4            # log-probability difference under which two hypotheses are tied


def padded(rows):
  out = np.zeros((len(rows), max(map(len, rows))), np.int32)
  for r, row in enumerate(rows):
    out[r, :len(row)] = row
  return out


@functools.partial(jax.jit, static_argnums=0)
def forward(cfg, params, inputs, targets):
  return transformer.Transformer(cfg.model).apply({"params": params}, inputs, targets)


def log_probs(cfg, params, sources, outputs, without_padding=False, eos_from=0):
  """Our model's log P(output + EOS | source) per row, normalised as in beam search.

  `without_padding`: each step's distribution with <pad> taken out (renormalised),
  as the CTranslate2 export computes it; `eos_from`: EOS taken out of the
  distributions before that position too, as CTranslate2's min_decoding_length
  does (ours leaves it in the normaliser).
  """
  inputs, targets = padded(sources), padded([o + [EOS_ID] for o in outputs])
  logits = forward(cfg, params, inputs, targets)
  if without_padding:
    logits = logits.at[..., PAD_ID].set(-jnp.inf)
  early = jnp.arange(logits.shape[1])[:, None] < eos_from
  logits = jnp.where(early & (jnp.arange(logits.shape[2]) == EOS_ID), -jnp.inf, logits)
  log_p = jax.nn.log_softmax(logits, axis=-1)                         # [batch, length, vocab]
  gold = jnp.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
  return np.asarray(jnp.sum(jnp.where(targets != 0, gold, 0.0), axis=1))


def assert_same_or_tied(ours, theirs, engine):
  """Identical translations, or ties: ours and theirs have the same log-probability."""
  cfg, params, _, _, ids, outputs = ours
  differ = [i for i, (a, b) in enumerate(zip(outputs, theirs)) if a != b]
  print(f"{engine}: {NUM_SENTENCES - len(differ)}/{NUM_SENTENCES} translations identical")
  if differ:
    sources = [ids[i] for i in differ]
    gaps = (log_probs(cfg, params, sources, [theirs[i] for i in differ])
            - log_probs(cfg, params, sources, [outputs[i] for i in differ]))
    for i, gap in zip(differ, gaps):
      assert abs(gap) < TIE, f"{engine} sentence {i}: {theirs[i]} vs ours {outputs[i]}, gap {gap}"
  assert len(differ) <= 2


def divergence_gap(cfg, params, source, ours, theirs):
  """Our model's log-probability of our token minus theirs at the first position where two
  outputs (ids without EOS) part: a greedy search's choice there, which float noise decides
  when the gap is within it (teacher-forced on their common prefix)."""
  ours, theirs = [*ours, EOS_ID], [*theirs, EOS_ID]
  t = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)
  logits = forward(cfg, params, padded([source]), padded([ours[:t + 1]]))[0, t]
  log_p = np.asarray(jax.nn.log_softmax(logits))
  return float(log_p[ours[t]] - log_p[theirs[t]])


def marian_generate(torch, model, sources, limits, source_pad, beam_size=1, min_length=0):
  """transformers' `generate` on Marian's ids: `sources` EOS-terminated (padded with the source
  side's `source_pad`), each within our output limit (`exported_search.output_limits`), no
  length penalty, padding never generated and EOS not forced at the limit, as ours; outputs
  in Marian's ids without EOS."""
  from t2t_jax.export import exported_search  # pylint: disable=import-outside-toplevel
  pad, eos = model.config.pad_token_id, model.config.eos_token_id
  outputs = [None] * len(sources)
  for limit, group in exported_search.batches(limits, 64):
    rows = np.full((len(group), max(len(sources[i]) for i in group)), source_pad)
    mask = np.zeros_like(rows)
    for r, i in enumerate(group):
      rows[r, :len(sources[i])], mask[r, :len(sources[i])] = sources[i], 1
    with torch.no_grad():
      tokens = model.generate(input_ids=torch.from_numpy(rows),
                              attention_mask=torch.from_numpy(mask), num_beams=beam_size,
                              length_penalty=0.0, do_sample=False, max_length=limit + 1,
                              min_length=min_length + 1, bad_words_ids=[[pad]],
                              forced_eos_token_id=None)
    for i, row in zip(group, tokens.numpy()[:, 1:].tolist()):
      outputs[i] = row[:row.index(eos)] if eos in row else row
  return outputs
