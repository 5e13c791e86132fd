"""Text in, text out with a trained model: the library behind `t2t-translate` and evaluation.

    translator = Translator("runs/demo")           # config, tokenizer, averaged params
    translator.translate(["the dog sleeps"])        # -> ["der Hund schläft"]
    translate_lines(cfg, params, tokenizer, lines)  # the same without a work directory

Every input line gives exactly one output line, in input order: a blank line
gives "", and a line longer than the model's `max_len` positions is cut to fit,
with a warning naming the line. Sentences are decoded in batches of similar
length (`decode.decode_ids`).
"""

from __future__ import annotations

import logging
import os
import pathlib
from typing import Any, Callable, Optional, Sequence

from t2t_jax import checkpoint
from t2t_jax import configs
from t2t_jax import decode
from t2t_jax import vocab
from t2t_jax import workdir as workdir_lib
from t2t_jax.ids import UNK_ID

log = logging.getLogger(__name__)

Params = Any


def load_tokenizer(workdir: str | os.PathLike) -> vocab.Tokenizer:
  """The shared SentencePiece model a work directory was trained with (`vocab/spm.model`)."""
  path = pathlib.Path(workdir) / "vocab" / "spm.model"
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: {workdir_lib.TRAIN_FIRST}")
  return vocab.Tokenizer(str(path))


def ids_to_text(tokenizer: vocab.Tokenizer, ids: Sequence[int]) -> str:
  """Detokenised text on one line.

  The model may have more ids than the SentencePiece model has pieces (a small
  corpus can give fewer than vocab_size); an undertrained model may emit those,
  and they read as unknown. A piece could hold a line break if the training text
  had one; it becomes a space, so that each input line gets one output line.
  """
  known = [i if i < tokenizer.vocab_size else UNK_ID for i in ids]
  return tokenizer.decode(known).replace("\r", " ").replace("\n", " ")


def encode_lines(cfg: configs.TransformerConfig, tokenizer: vocab.Tokenizer,
                 lines: Sequence[str], warn: Callable[[str], None] = log.warning
                 ) -> list[list[int]]:
  """Source ids per line, without EOS; [] for a blank line; too long lines truncated.

  Lines with more than cfg.max_len - 1 pieces (EOS needs the last position) are
  cut, with `warn` naming the 1-based line number.
  """
  limit = cfg.max_len - 1
  sources = []
  for number, line in enumerate(lines, 1):
    line = line.encode("utf-8", errors="replace").decode("utf-8")  # lone surrogates -> "?"
    ids = tokenizer.encode(line)[:-1] if line.strip() else []  # without the EOS encode adds
    if len(ids) > limit:
      warn(f"line {number} has {len(ids)} pieces; truncated to the model's {limit} "
           f"(max_len={cfg.max_len} positions, one kept for EOS)")
      ids = ids[:limit]
    sources.append(ids)
  return sources


def translate_lines(cfg: configs.TransformerConfig, params: Params, tokenizer: vocab.Tokenizer,
                    lines: Sequence[str], *, beam_size: Optional[int] = None,
                    alpha: Optional[float] = None, max_decode_extra: Optional[int] = None,
                    batch_size: Optional[int] = None,
                    warn: Callable[[str], None] = log.warning) -> list[str]:
  """One translation per line, in input order; settings default to the config's.

  Blank lines give "" without decoding; long lines are truncated (`encode_lines`).
  """
  sources = encode_lines(cfg, tokenizer, lines, warn)
  todo = [i for i, ids in enumerate(sources) if ids]
  outputs = decode.decode_ids(cfg, params, [sources[i] for i in todo], batch_size=batch_size,
                              beam_size=beam_size, alpha=alpha, max_decode_extra=max_decode_extra)
  translations = [""] * len(lines)
  for i, ids in zip(todo, outputs):
    translations[i] = ids_to_text(tokenizer, ids)
  return translations


class Translator:
  """A work directory's config, tokenizer and parameters, ready to translate lines."""

  def __init__(self, workdir: str | os.PathLike, average: bool = True, **overrides: Any):
    """`average`: the averaged params if present (else the latest checkpoint's).

    `overrides`: config fields to change for decoding, e.g. beam_size=1.
    """
    self.cfg = workdir_lib.load_config(workdir).replace(**overrides)
    self.tokenizer = load_tokenizer(workdir)
    self.params = checkpoint.load_params(workdir, averaged=average)

  def translate(self, lines: Sequence[str], **settings: Any) -> list[str]:
    """`translate_lines` with this work directory's model; `settings` override the config's."""
    return translate_lines(self.cfg, self.params, self.tokenizer, lines, **settings)
