"""`t2t-translate`: translate text with trained models, one output per input line.

    echo "Yesterday, the old man saw the small dog." | t2t-translate --workdir runs/demo
    t2t-translate --workdir runs/base --input newstest2014.en --output test.hyp --beam-size 4
    t2t-translate --workdir runs/demo --input in.en --n-best 4 --alignments
    t2t-translate --workdir runs/a --ensemble runs/b runs/c/checkpoints/90000 --input in.en
    t2t-translate --workdir runs/de-en --input mono.de --sample --top_k 10 --seed 1

Input is plain text, cased and untokenised, as the training corpus was (the
work directory's SentencePiece model cuts it into pieces). The work directory
holds what training wrote: `config.json` (the config), `vocab/spm.model` and
the checkpoints; the averaged parameters are used when present (`--no-average`:
the latest checkpoint's). `--workdir` and `--ensemble` also take one
checkpoint, WORKDIR/checkpoints/<step> or WORKDIR/averaged/<step>; an
ensemble's models must share the vocabulary, and their probabilities are
averaged at every step. With `--workdir` given, `--help` shows its values.

Input from a terminal or a pipe is translated as it arrives: each line as soon
as it is read (lines that arrived together are batched, up to --window), its
translation written and flushed before the next line is waited for, so a
program can write a line and read its translation. A file (--input, or stdin
redirected from one) is read --window lines at a time and sorted into batches
of similar length, which is faster for many lines; either way a file of any
length works, and translations come in input order (a progress bar on stderr
counts the lines of an --input file). Every input line gives one output: an
empty line gives an empty line. A line longer than the model's max_len
positions is split at sentence-like boundaries and the parts' translations
joined, with a warning (--long_inputs split, the default); crop: its first
max_len - 1 pieces are translated, with a warning; fail: the command stops
with an error naming the line. An output has at most
ceil(max_len_a x source pieces) + max_len_b pieces (source and output with
EOS; fairseq's --max-len-a/--max-len-b); the defaults, 1 and the config's
max_decode_extra, give ours: source length + max_decode_extra. A translation
has at least --min_len pieces before its EOS (default 1: never empty, as
fairseq and CTranslate2; 0 allows an empty one, as tensor2tensor).
Flags may be spelt with dashes or underscores (--beam-size, --beam_size).

Output lines (tab-separated; a tab inside a translation becomes a space):
  default        translation
  --alignments   translation TAB alignment
  --nbest N      index TAB hypothesis TAB score [TAB alignment]   N lines per input line
index is the 0-based input line; score the length-penalised log-probability
that ranks beam search's hypotheses (for --sample, the model's log-probability
of the sample; for a split line, the sum of its parts'); alignment is "i-j ..."
pairs of 0-based whitespace words, source word i to output word j (the
fast_align / Moses format), from the encoder-decoder attention of
--alignment_layer averaged over its heads. The library behind it:
t2t_jax/inference/translator.py, t2t_jax/inference/streaming.py.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import pathlib
import sys
from typing import Any, BinaryIO, Iterator, Optional, Sequence

import tqdm

from t2t_jax import configs
from t2t_jax import inference
from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.data import textio
from t2t_jax.decoding import sentence_batches
from t2t_jax.inference import long_inputs
from t2t_jax.inference import streaming
from t2t_jax.runtime import averaging
from t2t_jax.runtime import platform
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)


def _workdir_config(argv: Sequence[str]) -> Optional[configs.TransformerConfig]:
  """The config of the --workdir on a command line, for --help (None if there is none)."""
  path = flags.given_value(argv, "--workdir")
  if path is None:
    return None
  try:
    return workdir_lib.load_config(averaging.checkpoint_workdir(path) or path)
  except (OSError, ValueError):
    return None  # main says what is wrong with it


def _parser(cfg: Optional[configs.TransformerConfig] = None) -> argparse.ArgumentParser:
  """The flags, grouped; `cfg`: a work directory's config, whose values the help shows."""
  parser = flags.parser("t2t-translate", __doc__)
  models = parser.add_argument_group("models")
  models.add_argument("--workdir", required=True,
                      help="the training run's work directory (or one of its checkpoints)")
  models.add_argument("--ensemble", nargs="+", default=[], metavar="PATH",
                      help="more work directories or checkpoints decoded with --workdir's")
  models.add_argument("--average", action=argparse.BooleanOptionalAction, default=True,
                      help="use the averaged checkpoint if there is one (--no-average: the latest)")

  io = parser.add_argument_group("input and output")
  io.add_argument("--input", help="source sentences, one per line (default: stdin; a terminal "
                                  "or a pipe is translated line by line as it arrives)")
  io.add_argument("--output", help="where to write translations (default: stdout)")
  io.add_argument("--long_inputs", choices=long_inputs.POLICIES, default=long_inputs.DEFAULT,
                  help="a line longer than the model's limit"
                       + (f" ({cfg.max_len - 1} pieces)" if cfg else "")
                       + ": split at sentence-like boundaries and join the translations "
                       f"(default {long_inputs.DEFAULT}), crop it, or fail")
  io.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                  help="progress bar on stderr (default: for an --input file, on a terminal)")

  search = parser.add_argument_group("search")
  flags.add_search_flags(search, cfg)
  search.add_argument("--max_len_a", type=float, metavar="A",
                      help="max output length = A x input length + B (default 1)")
  search.add_argument("--min_len", type=int, metavar="N",
                      help="pieces before EOS may end a translation (default 1: never empty; "
                           "0 allows an empty translation)")

  nbest = parser.add_argument_group("n-best lists and alignments")
  nbest.add_argument("--nbest", "--n_best", type=int, metavar="N",
                     help="write N hypotheses per line: index TAB hypothesis TAB score")
  nbest.add_argument("--alignments", action="store_true",
                     help="append TAB and the word alignment (i-j pairs) to each output line")
  nbest.add_argument("--alignment_layer", type=int, default=-1,
                     help="decoder layer whose attention aligns (default -1: the last)")
  nbest.add_argument("--alignment_head", type=int,
                     help="one attention head (default: the mean of the layer's heads)")

  sampling = parser.add_argument_group("sampling (back-translation)")
  sampling.add_argument("--sample", action="store_true",
                        help="sample instead of beam search (--nbest N: N samples per line)")
  sampling.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
  sampling.add_argument("--top_k", type=int, default=0,
                        help="sample among the k most probable tokens (default 0: all)")
  sampling.add_argument("--seed", type=int, default=0, help="sampling seed")

  speed = parser.add_argument_group("speed")
  speed.add_argument("--batch_size", type=int,
                     help=f"sentences per batch; {flags.config_default(cfg, 'decode_batch_size')}")
  speed.add_argument("--window", type=int,
                     help="lines of a file held and sorted at once (default: 16 batches); "
                          "for a pipe, the most lines that arrived together batched at once")
  speed.add_argument("--in_flight", type=int, default=sentence_batches.IN_FLIGHT, metavar="N",
                     help=f"batches decoded at once (default {sentence_batches.IN_FLIGHT}; 1: one at a "
                          "time)")
  speed.add_argument("--programs", action=argparse.BooleanOptionalAction, default=True,
                     help="load compiled decoding programs from WORKDIR/programs and store "
                          "those compiled there (default; --no-programs: compile in memory only)")
  speed.add_argument("--store_programs", action="store_true",
                     help="compile the decoding programs of the default settings into "
                          "WORKDIR/programs and exit (for a work directory trained before, or "
                          "moved to another kind of machine)")
  speed.add_argument("--device", choices=platform.PLATFORMS,
                     help="compute on this kind of device (default: JAX's choice, an "
                          "accelerator when there is one)")
  speed.add_argument("--shortlist", action="store_true",
                     help="pick each batch's outputs among the candidates of the work "
                          "directory's lexical shortlist (built by t2t-shortlist)")
  speed.add_argument("--dtype", choices=("float32", "bfloat16"),
                     help="bfloat16: weights cast to bfloat16 once at load, every product "
                          "bfloat16 x bfloat16 accumulating in float32, the rest float32; "
                          + flags.config_default(cfg, "dtype"))
  speed.add_argument("--int8", action="store_true",
                     help="int8 weights (quantised at load) and activations in the Dense "
                          "products and the output projection, the rest float32; faster on a "
                          "CPU, translations may differ slightly from float32's")
  return parser


def _spelt(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
  """`argv` with flags spelt as the parser spells them: --beam-size and --n-best as
  --beam_size and --n_best (an unknown flag is left to the parser's did-you-mean)."""
  options = parser._option_string_actions  # pylint: disable=protected-access
  known = {option[2:].replace("-", "_"): option for option in options if option.startswith("--")}
  out = list(argv)
  for i, arg in enumerate(out):
    if arg == "--":
      break
    if not arg.startswith("--"):
      continue
    name, equals, value = arg.partition("=")
    key = name[2:].replace("-", "_")
    if key in known:
      out[i] = known[key] + equals + value
  return out


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  argv = list(sys.argv[1:] if argv is None else argv)
  parser = _parser(_workdir_config(argv))
  return parser.parse_args(_spelt(parser, argv))


@contextlib.contextmanager
def _output(path: Optional[str]) -> Iterator[BinaryIO]:
  if path is None:
    yield sys.stdout.buffer
    sys.stdout.buffer.flush()
  else:
    with open(path, "wb") as f:
      yield f


def _progress(translations, args: argparse.Namespace):
  show = args.progress if args.progress is not None else (args.input is not None
                                                          and sys.stderr.isatty())
  if not show:
    return translations
  total = textio.count_lines(args.input) if args.input is not None else None
  return tqdm.tqdm(translations, total=total, unit=" lines", file=sys.stderr, mininterval=1.0)


def _search_settings(args: argparse.Namespace) -> dict[str, Any]:
  settings = flags.search_overrides(args)
  if args.batch_size is not None:
    settings["decode_batch_size"] = args.batch_size
  return settings


@exits.command
def main(argv: Optional[Sequence[str]] = None) -> None:
  args = parse_args(argv)
  if not pathlib.Path(args.workdir).is_dir():
    raise FileNotFoundError(f"work directory {args.workdir} does not exist: "
                            f"{workdir_lib.TRAIN_FIRST}")
  if args.device is not None:
    platform.select(args.device)  # before anything runs on a device
  platform.enable_compilation_cache()  # before anything compiles; T2T_JAX_COMPILATION_CACHE=off disables
  translator = inference.Translator(args.workdir, average=args.average, ensemble=args.ensemble,
                                    dtype=args.dtype, int8=args.int8,
                                    programs=args.programs or args.store_programs,
                                    shortlist=args.shortlist, **_search_settings(args))
  if args.store_programs:
    count = translator.store_programs()
    log.info("%d decoding programs in %s (%d loaded, %d compiled)", count,
             translator.programs.directory, translator.programs.loaded,
             translator.programs.compiled)
    return
  alignments = (streaming.Alignments(args.alignment_layer, args.alignment_head)
                if args.alignments else None)
  source = args.input or sys.stdin.buffer
  # A terminal or a pipe: each group of lines as it arrives; undecodable bytes
  # become U+FFFD, so every input line still gets an output line.
  interactive = textio.arrives(source)
  lines = (textio.iter_arrived(source, errors="replace", most=args.window) if interactive
           else textio.iter_lines(source, errors="replace"))
  translations = translator.translate_stream(
      lines, n_best=args.nbest or 1, alignments=alignments, sample=args.sample,
      temperature=args.temperature, top_k=args.top_k, seed=args.seed, window=args.window,
      max_len_a=args.max_len_a, min_len=args.min_len, in_flight=args.in_flight, long_inputs=args.long_inputs,
      grouped=interactive)
  with _output(args.output) as out:
    for t in _progress(translations, args):
      rows = (streaming.format_nbest(t, bool(alignments)) if args.nbest is not None
              else [streaming.format_line(t, bool(alignments))])
      out.write("".join(row + "\n" for row in rows).encode("utf-8", errors="replace"))
      if interactive:
        out.flush()  # the reader may be waiting for this line before it writes the next


if __name__ == "__main__":
  main()
