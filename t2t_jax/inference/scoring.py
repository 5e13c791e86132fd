"""The log-probability of given translations: each target piece's and EOS's under the models,
teacher-forced (`t2t-score`, `Translator.score`).

    log_probs = score_ids(members, sources, targets, batch_size=64)   # per pair [target pieces]
    sources, targets = encode_pairs(tokenizer, source_lines, target_lines)   # EOS-terminated ids
    Translator(workdir).score(source_lines, target_lines)              # the sums (translator.py)

As Marian's scorer, fairseq's `--score-reference` and CTranslate2's `score_batch`: the
model reads the source and, at each target position, the target's previous pieces, and
gives the next piece (EOS last) its natural-log probability. The softmax is over the
whole target vocabulary, padding in the normaliser as in the search's (a shortlist's
candidates would give other numbers), of the logits the search computes
(`batch_decoder.teacher_forced_logits`: the model's own products, int8 or bfloat16
where asked). An ensemble's log-probability of a piece is log((1/M) sum_m p_m), the
distribution its beam search follows (`batch_decoder.ensemble_step`): a pair's sum is then
that search's score of it without the length penalty.

Pairs are sorted by length into batches of up to `batch_size` (`sentence_batches.by_length`),
each side padded to a bucket width (ids.py), so a file compiles a handful of programs;
a batch whose logits would pass `LOGITS_BUDGET` floats runs in parts of fewer rows. A
pair longer than the models' positions is refused in one line naming it: a score of a
cut pair is another number.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax.data import vocab
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import sentence_batches
from t2t_jax.ids import PAD_ID, bucket_length

Array = jax.Array

# The most logits [rows, target width, vocabulary] float32 one program holds (256 MB).
LOGITS_BUDGET = 1 << 26


@functools.partial(jax.jit, static_argnames="models")
def _log_probs(params: tuple, inputs: Array, targets: Array, *, models: tuple) -> Array:
  """inputs [rows, S], targets [rows, T] (EOS-terminated, 0-padded) -> each target id's
  log-probability [rows, T] float32 (0 on padding), under the members' average probability."""
  gold = []
  for cfg, member_params in zip(models, params):
    logits = batch_decoder.teacher_forced_logits(batch_decoder.Member(cfg, member_params),
                                                 inputs, targets)         # [rows, T, vocab]
    log_p = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    gold.append(jnp.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0])
  mean = gold[0] if len(gold) == 1 else (
      jax.scipy.special.logsumexp(jnp.stack(gold), axis=0) - math.log(len(gold)))
  return jnp.where(targets != PAD_ID, mean, 0.0)


def _padded(rows: Sequence[Sequence[int]], count: int, width: int) -> np.ndarray:
  out = np.zeros((count, width), np.int32)
  for r, ids in enumerate(rows):
    out[r, :len(ids)] = ids
  return out


def score_ids(members: Sequence[batch_decoder.Member], sources: Sequence[Sequence[int]],
              targets: Sequence[Sequence[int]], *, batch_size: int = 64,
              in_flight: int = sentence_batches.IN_FLIGHT) -> list[np.ndarray]:
  """Each pair's per-piece log-probabilities [len(target)] float32, in input order.

  `sources`, `targets`: EOS-terminated ids (targets in the target side's ids). ValueError
  naming the pair (1-based, as a line of the input) for a side longer than the models'
  positions (`batch_decoder.max_positions`) or models that do not share vocabularies.
  """
  if len(sources) != len(targets):
    raise ValueError(f"{len(sources)} sources but {len(targets)} targets: score pairs")
  members = tuple(members)
  batch_decoder.check_compatible(members)
  positions = batch_decoder.max_positions(members)
  for k, (source, target) in enumerate(zip(sources, targets)):
    longest = max((len(source), "source"), (len(target), "target"))
    if longest[0] > positions:
      raise ValueError(f"line {k + 1}: its {longest[1]} has {longest[0]} pieces with EOS, more "
                       f"than the model's {positions} positions; shorten that pair or leave it "
                       "out (a score of part of it is another number)")
  vocabulary = max(m.cfg.target_vocab for m in members)
  params, models = tuple(m.params for m in members), tuple(m.cfg for m in members)

  def score(batch: list[int]) -> list[np.ndarray]:
    widths = [min(bucket_length(max(len(side[i]) for i in batch)), positions)
              for side in (sources, targets)]
    rows = min(batch_size, 1 << (len(batch) - 1).bit_length())       # a power of two
    fits = max(1, LOGITS_BUDGET // (widths[1] * vocabulary))
    rows = min(rows, 1 << (fits.bit_length() - 1))                   # ... whose logits fit
    found = []
    for start in range(0, len(batch), rows):
      chunk = batch[start:start + rows]
      inputs, outputs = (_padded([side[i] for i in chunk], rows, width)
                         for side, width in zip((sources, targets), widths))
      log_p = np.asarray(_log_probs(params, *jax.device_put((inputs, outputs)), models=models))
      found += [log_p[r, :len(targets[i])] for r, i in enumerate(chunk)]
    return found

  lengths = [max(len(s), len(t)) for s, t in zip(sources, targets)]
  scored = sentence_batches.by_length(score, lengths, batch_size=batch_size, in_flight=in_flight)
  return [scored[k] for k in range(len(sources))]


def encode_pairs(tokenizer: vocab.Tokenizer, sources: Sequence[str], targets: Sequence[str]
                 ) -> tuple[list[list[int]], list[list[int]]]:
  """Source and target ids of each pair, EOS-terminated (an empty target is EOS alone);
  ValueError naming the line (1-based) of a source the tokenizer refuses (a multilingual
  model's without its language token)."""
  if len(sources) != len(targets):
    raise ValueError(f"{len(sources)} sources but {len(targets)} targets: score pairs")
  source_ids = []
  for k, line in enumerate(sources):
    try:
      source_ids.append(tokenizer.encode(line))
    except ValueError as e:
      raise ValueError(f"line {k + 1}: {e}") from None
  return source_ids, tokenizer.encode_target_batch(list(targets))


def total(log_probs: np.ndarray) -> float:
  """A pair's score: the sum of its pieces' log-probabilities (in float64)."""
  return float(np.sum(log_probs, dtype=np.float64))


def format_line(log_probs: np.ndarray, per_token: bool = False) -> str:
  """t2t-score's line: the sum with 6 decimals; `per_token`: a TAB, then each piece's."""
  line = f"{total(log_probs):.6f}"
  return line + "\t" + " ".join(f"{x:.6f}" for x in log_probs) if per_token else line
