"""`t2t-translate`: translate text with a trained work directory, one output line per input line.

    echo "yesterday the old man saw the small dog ." | t2t-translate --workdir runs/demo
    t2t-translate --workdir runs/base --input newstest2014.en --output test.hyp --beam_size 4

The work directory holds what training wrote: `config.json` (the config),
`vocab/spm.model` (the shared SentencePiece model) and the checkpoints; the
averaged parameters are used when present (`--no-average`: the latest
checkpoint's). Sentences are decoded in batches of similar length and written
back in input order. Every input line gives exactly one output line: an empty
line gives an empty line, and a line longer than the model's `max_len` positions
is cut to fit, with a warning naming the line.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import sys
from typing import Any, Callable, Optional, Sequence, TextIO

from t2t_jax import configs
from t2t_jax import vocab
from t2t_jax.ids import UNK_ID

_TRAIN_FIRST = "train a model there first, or pass the right --workdir"


def load_config(workdir: str | os.PathLike) -> configs.TransformerConfig:
  """The config a work directory was trained with (`workdir/config.json`)."""
  path = pathlib.Path(workdir) / "config.json"
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: {_TRAIN_FIRST}")
  fields = json.loads(path.read_text())
  try:
    return configs.TransformerConfig(**fields)
  except TypeError as e:
    raise ValueError(f"{path} does not match this version's TransformerConfig ({e})") from None


def load_tokenizer(workdir: str | os.PathLike) -> vocab.Tokenizer:
  path = pathlib.Path(workdir) / "vocab" / "spm.model"
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: {_TRAIN_FIRST}")
  return vocab.Tokenizer(str(path))


def _warn(message: str) -> None:
  print(f"warning: {message}", file=sys.stderr)


def translate_lines(cfg: configs.TransformerConfig, params: Any, tokenizer: vocab.Tokenizer,
                    lines: Sequence[str], *, beam_size: Optional[int] = None,
                    alpha: Optional[float] = None, max_decode_extra: Optional[int] = None,
                    batch_size: Optional[int] = None,
                    warn: Callable[[str], None] = _warn) -> list[str]:
  """One translation per line, in input order; settings default to the config's.

  Blank lines give "" without decoding. Lines with more than cfg.max_len - 1
  pieces (EOS needs the last position) are truncated, with `warn` naming the
  1-based line number.
  """
  # Imported here: loading a work directory's config and vocabulary needs no JAX.
  from t2t_jax import decode  # pylint: disable=import-outside-toplevel

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
  todo = [i for i, ids in enumerate(sources) if ids]
  outputs = decode.decode_ids(cfg, params, [sources[i] for i in todo], batch_size=batch_size,
                              beam_size=beam_size, alpha=alpha, max_decode_extra=max_decode_extra)
  translations = [""] * len(lines)
  for i, ids in zip(todo, outputs):
    translations[i] = ids_to_text(tokenizer, ids)
  return translations


def ids_to_text(tokenizer: vocab.Tokenizer, ids: Sequence[int]) -> str:
  """Detokenised text on one line.

  The model may have more ids than the SentencePiece model has pieces (a small
  corpus can give fewer than vocab_size); an undertrained model may emit those,
  and they read as unknown. A piece could hold a line break if the training text
  had one; it becomes a space, so that each input line gets one output line.
  """
  known = [i if i < tokenizer.vocab_size else UNK_ID for i in ids]
  return tokenizer.decode(known).replace("\r", " ").replace("\n", " ")


class Translator:
  """A work directory's config, tokenizer and parameters, ready to translate lines."""

  def __init__(self, workdir: str | os.PathLike, average: bool = True, **overrides: Any):
    """`overrides`: config fields to change for decoding, e.g. beam_size=1."""
    from t2t_jax import checkpoint  # pylint: disable=import-outside-toplevel  (orbax)

    self.cfg = load_config(workdir).replace(**overrides)
    self.tokenizer = load_tokenizer(workdir)
    self.params = checkpoint.load_params(workdir, averaged=average)

  def translate(self, lines: Sequence[str], **settings: Any) -> list[str]:
    """`translate_lines` with this work directory's model; `settings` override the config's."""
    return translate_lines(self.cfg, self.params, self.tokenizer, lines, **settings)


def _read_input(path: Optional[str]) -> list[str]:
  # Only "\n" ends a line: a stray "\r", "\x0b" or U+2028 inside a sentence stays
  # in it, so the output has as many lines as the input. Undecodable bytes become U+FFFD.
  stream: TextIO
  if path is None:
    stream = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="\n")
  else:
    stream = open(path, encoding="utf-8", errors="replace", newline="\n")
  with stream:
    lines = [line[:-1] if line.endswith("\n") else line for line in stream]
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def _write_output(path: Optional[str], lines: Sequence[str]) -> None:
  text = "".join(line + "\n" for line in lines)
  if path is None:
    sys.stdout.buffer.write(text.encode("utf-8", errors="replace"))
    sys.stdout.flush()
  else:
    with open(path, "w", encoding="utf-8", errors="replace", newline="\n") as f:
      f.write(text)


def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = argparse.ArgumentParser(prog="t2t-translate", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--workdir", required=True, help="the training run's work directory")
  parser.add_argument("--input", help="source sentences, one per line (default: stdin)")
  parser.add_argument("--output", help="where to write translations (default: stdout)")
  parser.add_argument("--beam_size", type=int, help="default: the config's (4)")
  parser.add_argument("--alpha", type=float,
                      help="length penalty exponent; default: the config's (0.6)")
  parser.add_argument("--max_decode_extra", type=int,
                      help="max output length = input length + this; default: the config's (50)")
  parser.add_argument("--batch_size", type=int, help="sentences per batch; default: the config's")
  parser.add_argument("--average", action=argparse.BooleanOptionalAction, default=True,
                      help="use the averaged checkpoint if there is one (--no-average: the latest)")
  args = parser.parse_args(argv)

  if not pathlib.Path(args.workdir).is_dir():
    raise SystemExit(f"error: work directory {args.workdir} does not exist: {_TRAIN_FIRST}")
  overrides = {name: value for name, value in (
      ("beam_size", args.beam_size), ("alpha", args.alpha),
      ("max_decode_extra", args.max_decode_extra), ("decode_batch_size", args.batch_size))
               if value is not None}
  try:
    translator = Translator(args.workdir, average=args.average, **overrides)
    lines = _read_input(args.input)
  except (OSError, ValueError) as e:
    raise SystemExit(f"error: {e}") from None
  _write_output(args.output, translator.translate(lines))


if __name__ == "__main__":
  main()
