"""Lines of text in, lines out with one model: the conversions every translation path shares, and
the plain translation of a list of lines that training scores its test set with.

    texts = translate_lines(cfg, params, tokenizer, lines)   # one model's beam search

The Translator (inference/translator.py) is the full way to translate (ensembles, n-best
lists, alignments, sampling, long lines split, int8, shortlists, stored programs); it
reads and writes text with the same functions, so both give the same translation of a
line. `translate_lines` gives "" for a blank line and cuts a line longer than the model
takes (a warning names it), as `t2t-translate --long_inputs=crop` does.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Sequence

from t2t_jax import configs
from t2t_jax.data import vocab
from t2t_jax.decoding import sentence_batches
from t2t_jax.ids import UNK_ID

log = logging.getLogger(__name__)

# (tokenizer, text, target) -> (ids without EOS, the word of each id):
# inference/alignment.py's `encode_words`.
Words = Callable[[vocab.Tokenizer, str, bool], tuple[list[int], list[int]]]


def known_ids(tokenizer: vocab.Tokenizer, ids: Sequence[int]) -> list[int]:
  """Output `ids` with those the target side's SentencePiece model lacks read as unknown.

  The model may have more ids than the SentencePiece model has pieces (a small corpus
  can give fewer than vocab_size); an undertrained model may emit those.
  """
  return [int(i) if i < tokenizer.target_vocab_size else UNK_ID for i in ids]


def one_line(text: str) -> str:
  """`text` with its line breaks as spaces: a piece could hold a line break if the training
  text had one, and each input line gets one output line (and the same words)."""
  return text.replace("\r", " ").replace("\n", " ")


def ids_to_text(tokenizer: vocab.Tokenizer, ids: Sequence[int]) -> str:
  """Detokenised text on one line; ids unknown to the SentencePiece model read as unknown."""
  return one_line(tokenizer.decode(known_ids(tokenizer, ids)))


def _valid(line: str) -> str:
  return line.encode("utf-8", errors="replace").decode("utf-8")    # lone surrogates -> "?"


def source_pieces(tokenizer: vocab.Tokenizer, line: str) -> int:
  """How many source pieces `encode_line` makes of `line` before any cut."""
  return len(tokenizer.encode(_valid(line))) - 1


def encode_line(tokenizer: vocab.Tokenizer, line: str, limit: int, number: int,
                warn: Callable[[str], None] = log.warning, words: Optional[Words] = None,
                target: bool = False) -> tuple[list[int], Optional[list[int]]]:
  """Source ids of one line without EOS ([] when blank), cut to `limit`; and, with `words`,
  the word each id belongs to (else None). `number` (1-based) names the line in the
  warning about a cut. `target`: the line is a target sentence, cut by the target side's
  model (`vocab.Tokenizer.encode_target`)."""
  line = _valid(line)
  if not line.strip():
    return [], [] if words is not None else None
  if words is not None:
    ids, found = words(tokenizer, line, target)
  else:
    encode = tokenizer.encode_target if target else tokenizer.encode
    ids, found = encode(line)[:-1], None                             # without the EOS
  if len(ids) > limit:
    warn(f"line {number} has {len(ids)} pieces; truncated to the model's {limit} "
         f"(max_len={limit + 1} positions, one kept for EOS)")
    ids, found = ids[:limit], None if found is None else found[:limit]
  return ids, found


def translate_lines(cfg: configs.TransformerConfig, params: Any, tokenizer: vocab.Tokenizer,
                    lines: Sequence[str], **settings: Any) -> list[str]:
  """The best translation of each line by one model's beam search, in input order.

  `settings`: `sentence_batches.decode_ids`' (batch_size, in_flight, beam_size, alpha,
  max_decode_extra, min_len; the config's by default).
  """
  sources = [encode_line(tokenizer, line, cfg.max_len - 1, k + 1)[0]
             for k, line in enumerate(lines)]
  real = [k for k, ids in enumerate(sources) if ids]
  outputs = sentence_batches.decode_ids(cfg, params, [sources[k] for k in real], **settings)
  texts = [""] * len(lines)
  for k, ids in zip(real, outputs):
    texts[k] = ids_to_text(tokenizer, ids)
  return texts
