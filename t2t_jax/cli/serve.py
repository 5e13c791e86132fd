"""`t2t-serve`: a translation server that batches concurrent requests, with a page to try it.

    t2t-serve --workdir runs/demo                        # http://127.0.0.1:8000/ : the page
    t2t-serve --workdir runs/demo --engine ctranslate2   # CTranslate2 decodes (exported on first use)
    curl -s 127.0.0.1:8000/v1/translate -H 'content-type: application/json' \\
         -d '{"text": ["the small dog sleeps ."], "n_best": 2}'

Needs the serve extra (`pip install -e .[serve]`; `--engine ctranslate2` also
the export extra). Routes: POST /v1/translate, GET /health (200 once the
decoding programs are compiled or read from the compilation cache), GET
/metrics (Prometheus), GET /docs (OpenAPI), GET / (the page). Lines of
concurrent requests are decoded together (up to --max_tokens source tokens and
--max_batch lines, waiting at most --max_wait_ms for them; a long request is
split across batches); a request that does not fit in the queue (--max_queue
lines) gets 503 with Retry-After. SIGTERM or Ctrl-C: no new
connections, the requests under way are answered, then exit 0.

A line's translation is the one `t2t-translate` gives (the same model, settings
and search). The start-up compiles the batch shapes (`engines.JaxEngine.shapes`)
of lines up to --warmup_pieces pieces with the default settings: the first
--warmup_shapes before /health answers 200, the others in the background, each
used as soon as it is compiled; a batch pads into the cheapest shape compiled,
so no request waits for a compilation. Other beam sizes, n-best lists,
alignments and longer lines compile on first use. Docs: README, "Serve".
"""

from __future__ import annotations

import argparse
import functools
import logging
from typing import Optional, Sequence

from t2t_jax import errors
from t2t_jax import inference
from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.runtime import platform

log = logging.getLogger("t2t-serve")


def _parser() -> argparse.ArgumentParser:
  parser = flags.parser("t2t-serve", __doc__)
  parser.add_argument("--workdir", required=True, help="the training run's work directory")
  parser.add_argument("--checkpoint", help="one checkpoint of it (default: the averaged "
                                           "parameters, else the latest checkpoint)")
  parser.add_argument("--average", action=argparse.BooleanOptionalAction, default=True,
                      help="use the averaged checkpoint if there is one (--no-average: the latest)")
  parser.add_argument("--engine", choices=("jax", "ctranslate2"), default="jax",
                      help="what decodes (default jax; ctranslate2: the work directory's export)")
  parser.add_argument("--int8", action="store_true",
                      help="--engine jax: int8 weights and activations in the Dense products and "
                           "the output projection (t2t-translate --int8); translations may "
                           "differ slightly from float32's")
  parser.add_argument("--dtype", choices=("float32", "bfloat16"),
                      help="--engine jax: bfloat16 weights (cast at load) and products, the rest "
                           "float32 (t2t-translate --dtype); default: the work directory's")
  flags.add_search_flags(parser)   # --beam_size: a request's default
  parser.add_argument("--shortlist", action="store_true",
                      help="--engine jax: pick each batch's outputs among the candidates of the "
                           "work directory's lexical shortlist (built by t2t-shortlist)")
  parser.add_argument("--max_len_a", type=float, default=1.0, metavar="A",
                      help="max output length = A x input length + B (default 1), both engines")
  parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
  parser.add_argument("--port", type=int, default=8000, help="port (0: any free one)")
  parser.add_argument("--max_batch", type=int,
                      help="lines per decoded batch (default on a CPU: 8 for the jax engine, 32 "
                           "for ctranslate2; on a GPU or TPU: the config's decode_batch_size)")
  parser.add_argument("--max_tokens", type=int, default=2048,
                      help="source tokens (pieces and EOS) per decoded batch at most; a longer "
                           "line goes alone (default 2048)")
  parser.add_argument("--max_wait_ms", type=float, default=5.0,
                      help="how long a line waits for others to fill its batch (default 5)")
  parser.add_argument("--max_queue", type=int, default=1024,
                      help="lines waiting at most; beyond, 503 (default 1024)")
  parser.add_argument("--workers", type=int, default=3,
                      help="batches decoded at once (default 3: on a 2-core CPU a third keeps "
                           "the cores busy while the others are between programs)")
  parser.add_argument("--max_lines", type=int, default=256, help="lines per request (413 beyond)")
  parser.add_argument("--max_chars", type=int, default=2000,
                      help="characters per line (413 beyond)")
  parser.add_argument("--max_beam", type=int, default=16, help="largest beam_size a request "
                                                               "may ask for")
  parser.add_argument("--warmup_pieces", type=int,
                      help="compile at start-up the batch shapes of lines up to this many pieces "
                           "(default: the model's max_len - 1; 0: none)")
  parser.add_argument("--warmup_shapes", type=int, default=1,
                      help="batch shapes compiled before /health answers 200 (default 1: one "
                           "line of any length); the others compile in the background while "
                           "requests are padded into the shapes compiled")
  parser.add_argument("--threads", type=int, default=0,
                      help="--engine ctranslate2: its threads, shared by its --workers replicas "
                           "(default 0: all cores)")
  return parser


def _engine(args: argparse.Namespace, translator: inference.Translator):
  """The engine, with --max_batch lines per batch or the engine's default."""
  from t2t_jax.serve import engines  # pylint: disable=import-outside-toplevel  (the serve extra)
  if args.engine == "jax":
    max_batch = args.max_batch or engines.JaxEngine.default_max_batch(translator.cfg)
    return engines.JaxEngine(translator, max_batch, max_len_a=args.max_len_a)
  if args.checkpoint is not None:
    raise ValueError("--engine ctranslate2 exports the work directory's parameters; "
                     "--checkpoint is for --engine jax")
  max_batch = args.max_batch or engines.CTranslate2Engine.default_max_batch(translator.cfg)
  return engines.CTranslate2Engine.from_workdir(args.workdir, translator, max_batch,
                                                threads=args.threads, average=args.average,
                                                max_len_a=args.max_len_a, workers=args.workers)


@exits.command
def main(argv: Optional[Sequence[str]] = None) -> None:
  args = _parser().parse_args(argv)
  if args.shortlist and args.engine != "jax":
    raise ValueError("--shortlist is for --engine jax (CTranslate2 reads the exported vmap.txt "
                     "with use_vmap=True)")
  if (args.int8 or args.dtype) and args.engine != "jax":
    raise ValueError(f"--{'int8' if args.int8 else 'dtype'} is for --engine jax (the ctranslate2 "
                     "engine decodes in float32)")
  try:
    from t2t_jax.serve import app as app_lib  # pylint: disable=import-outside-toplevel
    from t2t_jax.serve import engines  # pylint: disable=import-outside-toplevel
    from t2t_jax.serve import protocol  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise errors.MissingExtraError(
        f"{e}: the serve extra is not installed: {errors.install('serve')}") from None
  platform.enable_compilation_cache()
  translator = inference.Translator(args.checkpoint or args.workdir, average=args.average,
                                    int8=args.int8, dtype=args.dtype, programs=True,
                                    shortlist=args.shortlist,
                                    **flags.search_overrides(args))
  engine = _engine(args, translator)
  settings = engines.Settings(beam_size=translator.cfg.beam_size)
  pieces = translator.cfg.max_len - 1 if args.warmup_pieces is None else args.warmup_pieces
  options = app_lib.Options(
      max_batch=engine.batch_size, max_tokens=args.max_tokens, max_queue=args.max_queue,
      max_wait=args.max_wait_ms / 1000, workers=args.workers,
      limits=protocol.Limits(args.max_lines, args.max_chars, args.max_beam))
  first = args.warmup_shapes
  app = app_lib.create_app(
      engine, options, attention=functools.partial(engines.attention, translator),
      warm_up=lambda stop: log.info("warm-up: %d decoding programs",
                                    engine.warm_up(pieces, settings, count=first, stop=stop)),
      background=lambda stop: log.info("background warm-up: %d decoding programs",
                                       engine.warm_up(pieces, settings, skip=first, stop=stop)))
  app_lib.serve(app, args.host, args.port,
                f"serving {args.workdir} ({engine.name} engine) on http://{{}}/")


if __name__ == "__main__":
  main()
