"""Beam search in the exported models, with our decoding settings: ids in, ids out.

    limits = output_limits(cfg, sources)      # as decoding/batch_decoder.py bounds ours
    outputs = marian_generate(marian, sources, limits, beam_size=4, length_penalty=0.0)
    outputs, scores = ctranslate2_translate(translator, tokens, sources, limits, beam_size=4)

For comparisons and benchmarks (tests/export/, benchmarks/): `sources`
are EOS-terminated id lists, outputs are id lists without EOS, in input order.
transformers and CTranslate2 take one output limit per call where we have one
per sentence, so sentences are grouped by limit, then cut into batches. The
engines' length penalties are not ours (docs/export.md): only length_penalty=0
with alpha=0 ranks hypotheses the same way.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from t2t_jax import configs
from t2t_jax.decoding import beam_search
from t2t_jax.decoding import batch_decoder
from t2t_jax.export import loading
from t2t_jax.ids import strip_eos


def output_limits(cfg: configs.TransformerConfig, sources: Sequence[Sequence[int]],
                  max_decode_extra: Optional[int] = None, max_len_a: float = 1.0) -> list[int]:
  """Each sentence's maximum output length, EOS included: `batch_decoder.output_limits`,
  our one rule.

  `sources` with their EOS; the limit is ceil(max_len_a x length) + max_decode_extra.
  """
  extra = cfg.max_decode_extra if max_decode_extra is None else max_decode_extra
  lengths = [len(source) for source in sources]
  # Only which positions hold ids matters to the rule, not the ids themselves.
  rows = (np.arange(max(lengths, default=1))[None, :] < np.array(lengths)[:, None]).astype(np.int32)
  return batch_decoder.output_limits(rows, extra, max_len_a, cfg.max_len)[1].tolist()


def batches(limits: Sequence[int], batch_size: int) -> Iterator[tuple[int, list[int]]]:
  """(limit, sentence indices) with one limit and at most `batch_size` sentences each."""
  order = sorted(range(len(limits)), key=lambda i: limits[i])
  for limit, group in itertools.groupby(order, key=lambda i: limits[i]):
    group = list(group)
    for start in range(0, len(group), batch_size):
      yield limit, group[start:start + batch_size]


def _padded(rows: Sequence[Sequence[int]]) -> np.ndarray:
  out = np.zeros((len(rows), max(map(len, rows))), np.int64)
  for r, row in enumerate(rows):
    out[r, :len(row)] = row
  return out


def marian_generate(marian: Any, sources: Sequence[Sequence[int]], limits: Sequence[int], *,
                    beam_size: int, length_penalty: float, batch_size: int = 64,
                    min_len: int = beam_search.MIN_LEN) -> list[list[int]]:
  """`marian.generate` beam search (padding never generated: the export's generation config;
  EOS not before `min_len` tokens, as ours)."""
  torch = loading.require("torch")
  outputs: list[list[int]] = [[] for _ in sources]
  for limit, group in batches(limits, batch_size):
    inputs = torch.from_numpy(_padded([sources[i] for i in group]))
    with torch.no_grad():
      # max_length counts the decoder start token.
      tokens = marian.generate(input_ids=inputs, attention_mask=(inputs != 0).long(),
                               num_beams=beam_size, length_penalty=length_penalty,
                               max_length=limit + 1, min_length=min_len + 1)
    for i, row in zip(group, tokens.numpy()):
      outputs[i] = strip_eos(row[1:])
  return outputs


def ctranslate2_translate(translator: Any, tokens: Sequence[str], sources: Sequence[Sequence[int]],
                          limits: Sequence[int], *, beam_size: int, length_penalty: float = 0.0,
                          batch_size: int = 64, min_length: bool = False,
                          min_len: int = beam_search.MIN_LEN, use_vmap: bool = False
                          ) -> tuple[list[list[int]], list[float]]:
  """`translator.translate_batch` beam search; scores are CTranslate2's (log P / |Y|^penalty).

  `tokens` is the exported vocabulary (`loading.vocabulary`); the sources' pieces
  go in with their </s>, as MarianTokenizer makes them (export/ctranslate2.py). EOS comes
  after at least `min_len` tokens, as ours (CTranslate2's min_decoding_length); `min_length=True`
  forbids it before each batch's limit, so that every output has that length
  (for timing an untrained model). `use_vmap`: each batch's outputs among the
  candidates of the model's vocabulary map (export/ctranslate2.py `VMAP`).
  """
  ids = {token: i for i, token in enumerate(tokens)}
  outputs: list[list[int]] = [[] for _ in sources]
  scores = [0.0] * len(sources)
  for limit, group in batches(limits, batch_size):
    pieces = [[tokens[t] for t in sources[i]] for i in group]
    results = translator.translate_batch(
        pieces, beam_size=beam_size, length_penalty=length_penalty, max_decoding_length=limit,
        min_decoding_length=limit if min_length else min_len, return_scores=True,
        max_batch_size=batch_size, use_vmap=use_vmap)
    for i, result in zip(group, results):
      outputs[i] = [ids[p] for p in result.hypotheses[0]]
      scores[i] = result.scores[0]
  return outputs, scores
