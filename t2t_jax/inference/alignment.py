"""Hard word alignments from the decoder-encoder attention, as `i-j` pairs (fast_align, Moses).

The model is run once, teacher-forced, on each (source, translation) pair; one
decoder layer's cross-attention probabilities (`cross_attention`, read from the
`intermediates` the forward pass sows, as `inference/visualize.py` does) are averaged over
heads, or one head is taken. Each target piece is aligned to the source piece
it attends to most (`hard_alignment`); EOS is left out on both sides, as
fairseq's `--print-alignment` does. Pieces are then mapped to whitespace words
(`encode_words`, `decode_words`: SentencePiece's character offsets, so a word
split into several pieces, or holding an unknown character, stays one word),
and the word pairs are deduplicated and sorted:

    "0-0 1-1 2-3 3-2"    source word i - target word j, 0-based, sorted by (i, j)

Word j indexes `translation.split()` and word i `source_line.split()`.
The last layer is the default (fairseq's); `layer` picks another (negative
counts from the end; Garg et al. 2019 found the penultimate one often aligns
better).
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from t2t_jax import configs
from t2t_jax.ids import bucket_length
from t2t_jax.ids import EOS_ID
from t2t_jax.kernels import choice
from t2t_jax.model import transformer

Pairs = list[tuple[int, int]]


# ---------------------------------------------------------------- pieces to words


def word_of_pieces(text: str, byte_spans: Sequence[tuple[int, int]]) -> list[int]:
  """The index in `text.split()` of the word each piece belongs to.

  `byte_spans` are the pieces' [begin, end) UTF-8 byte offsets in `text` (what
  SentencePiece reports). A piece overlapping no word (a lone "▁", an empty
  span) belongs to the next piece's word, as "▁" starts the word after it, or
  to the previous one at the end; -1 when `text` has no words at all.
  """
  char_at_byte = []                                                  # byte offset -> char index
  word_at_char = []                                                  # char index -> word or -1
  word, in_word = -1, False
  for ch in text:
    char_at_byte.extend([len(word_at_char)] * len(ch.encode("utf-8")))
    if ch.isspace():
      in_word = False
      word_at_char.append(-1)
    else:
      word += not in_word
      in_word = True
      word_at_char.append(word)
  char_at_byte.append(len(word_at_char))
  words = []
  for begin, end in byte_spans:
    first, last = char_at_byte[min(begin, len(char_at_byte) - 1)], \
        char_at_byte[min(end, len(char_at_byte) - 1)]
    found = [w for w in word_at_char[first:last] if w >= 0]
    words.append(found[0] if found else -1)
  following = -1
  for i in reversed(range(len(words))):                               # "▁" -> the next word
    if words[i] < 0:
      words[i] = following
    following = words[i]
  previous = -1
  for i, w in enumerate(words):                                       # trailing ones -> the last
    if w < 0:
      words[i] = previous
    previous = words[i]
  return words


def _processor(tokenizer: Any, side: str = "sp") -> Any:
  """`vocab.Tokenizer` or a `sentencepiece.SentencePieceProcessor` -> the processor of the
  source side ("sp") or the target side ("target_sp")."""
  return getattr(tokenizer, side, tokenizer)


def encode_words(tokenizer: Any, text: str, target: bool = False) -> tuple[list[int], list[int]]:
  """The ids of `text` (without EOS) and the word of `text.split()` each one belongs to;
  `target`: cut as a target sentence (the target side's model). A source's leading
  language token (`vocab.Tokenizer.split_language`) is one id, in the first word."""
  token, rest = (None, text) if target or not hasattr(tokenizer, "split_language") else \
      tokenizer.split_language(text)
  start = 0 if token is None else len(token.encode("utf-8"))         # rest's first byte
  proto = _processor(tokenizer, "target_sp" if target else "sp").encode(rest, return_type="proto")
  ids = [p.id for p in proto.pieces]
  spans = [(start + p.begin, start + p.end) for p in proto.pieces]
  if token is not None:
    ids, spans = [tokenizer.sp.piece_to_id(token), *ids], [(0, start), *spans]
  return ids, word_of_pieces(text, spans)


def decode_words(tokenizer: Any, ids: Sequence[int]) -> tuple[str, list[int]]:
  """The text of `ids` (ids the SentencePiece model knows, no EOS) and each id's word in it."""
  if len(ids) == 0:
    # No ids, no text (an empty translation): sentencepiece 0.2.2 (GPU images) cannot make
    # the proto of no ids (a TypeError from its own parser); 0.2.3 returns an empty one.
    return "", []
  proto = _processor(tokenizer, "target_sp").decode([int(i) for i in ids], return_type="proto")
  spans = [(p.begin, p.end) for p in proto.pieces]
  return proto.text, word_of_pieces(proto.text, spans)


# ------------------------------------------------------------- attention to pairs


def hard_alignment(attention: np.ndarray, source_words: Sequence[int],
                   target_words: Sequence[int]) -> Pairs:
  """Sorted, deduplicated (source word, target word) pairs from one sentence's attention.

  `attention` [target_pieces, source_pieces] (heads already reduced; EOS rows
  and columns may follow: only the first len(target_words) rows and
  len(source_words) columns are read). Each target piece takes the source
  piece with the largest weight (the first on ties).
  """
  attention = np.asarray(attention)
  rows, columns = len(target_words), len(source_words)
  if attention.ndim != 2 or attention.shape[0] < rows or attention.shape[1] < columns:
    raise ValueError(f"attention of shape {attention.shape} does not cover {rows} target and "
                     f"{columns} source pieces")
  if rows == 0 or columns == 0:
    return []
  best = np.argmax(attention[:rows, :columns], axis=1)               # [target_pieces]
  pairs = {(source_words[s], target_words[t]) for t, s in enumerate(best)}
  return sorted((i, j) for i, j in pairs if i >= 0 and j >= 0)


def format_pairs(pairs: Sequence[tuple[int, int]]) -> str:
  """[(0, 0), (1, 2)] -> "0-0 1-2" (the Moses / fast_align line format)."""
  return " ".join(f"{i}-{j}" for i, j in pairs)


# ------------------------------------------------------------------- with the model


def check_layer_and_head(cfg: configs.ModelConfig, layer: int,
                         head: Optional[int]) -> int:
  """The decoder layer's index (`layer` may count from the end); ValueError if either is missing."""
  layers = cfg.num_decoder_layers
  if not -layers <= layer < layers:
    raise ValueError(f"layer={layer} does not exist: the decoder has {layers} layers "
                     f"(0..{layers - 1}, or negative from the end)")
  if head is not None and not 0 <= head < cfg.num_heads:
    raise ValueError(f"head={head} does not exist: the model has {cfg.num_heads} heads")
  return layer % layers


@functools.partial(jax.jit, static_argnames=("model", "layer", "head"))
def _cross_attention(params: Any, inputs: jax.Array, targets: jax.Array, *,
                     model: configs.ModelConfig, layer: int,
                     head: Optional[int]) -> jax.Array:
  _, sown = transformer.Transformer(model, choice.plugins(model)).apply(
      {"params": params}, inputs, targets, train=False, mutable=["intermediates"])
  weights = sown["intermediates"]["decoder"][f"layers_{layer}"]["cross_attention"]
  weights = weights["attention_weights"][0]                          # [batch, heads, tgt, src]
  return weights.mean(axis=1) if head is None else weights[:, head]  # [batch, tgt, src]


def cross_attention(cfg: configs.ModelConfig, params: Any, inputs: Any, targets: Any, *,
                    layer: int = -1, head: Optional[int] = None) -> np.ndarray:
  """One decoder layer's encoder-decoder attention [batch, tgt, src], float32.

  `inputs` [batch, src] and `targets` [batch, tgt] are EOS-terminated,
  0-padded ids; row t is the step that outputs target token t. Heads are
  averaged unless `head` picks one.
  """
  layer = check_layer_and_head(cfg, layer, head)
  return np.asarray(_cross_attention(params, jnp.asarray(inputs, jnp.int32),
                                     jnp.asarray(targets, jnp.int32), model=cfg,
                                     layer=layer, head=head))


def _padded(rows: Sequence[Sequence[int]], num_rows: int, limit: int) -> np.ndarray:
  """EOS-terminated rows in a [num_rows, bucketed width] zero array; EOS is left out of a
  row of `limit` ids (an output that reached the length limit)."""
  width = min(bucket_length(max(len(r) for r in rows) + 1), limit)
  out = np.zeros((num_rows, width), np.int32)
  for row, ids in enumerate(rows):
    ids = [*ids, EOS_ID][:width]
    out[row, :len(ids)] = ids
  return out


def align(models: Sequence[tuple[configs.ModelConfig, Any]],
          sources: Sequence[Sequence[int]], source_words: Sequence[Sequence[int]],
          outputs: Sequence[Sequence[int]], output_words: Sequence[Sequence[int]], *,
          layer: int = -1, head: Optional[int] = None) -> list[Pairs]:
  """Word alignments of one batch of (source ids, output ids) pairs, both without EOS.

  `models`: (cfg, params) of one model, or of several whose attention is
  averaged, as fairseq's ensembles align (`batch_decoder.Member`s; `layer` counts
  in each). `source_words[b][p]` is the
  word of source piece p (`encode_words`), `output_words[b][p]` that of output
  piece p (`decode_words`). The batch is padded to a bucketed shape (rows
  rounded up to a power of two) so that few programs compile. Returns one
  sorted list of (source word, target word) per pair.
  """
  if not sources:
    return []
  limit = min(cfg.max_len for cfg, _ in models)
  too_long = [b for b, (s, o) in enumerate(zip(sources, outputs))
              if len(s) + 1 > limit or len(o) > limit]
  if too_long:
    raise ValueError(f"pair {too_long[0]} does not fit the model's max_len={limit} "
                     "positions (the source with EOS)")
  rows = 1 << (len(sources) - 1).bit_length()
  inputs = _padded(sources, rows, limit)
  targets = _padded(outputs, rows, limit)
  weights = sum(cross_attention(cfg, params, inputs, targets, layer=layer, head=head)
                for cfg, params in models) / len(models)
  return [hard_alignment(weights[b], source_words[b], output_words[b])
          for b in range(len(sources))]
