"""The engines on the trained test model: a warmed-up server compiles nothing for a request;
both engines bound each output by our one length rule."""

import concurrent.futures
import contextlib
import math

import jax
import numpy as np

from t2t_jax import inference
from t2t_jax.decoding import search as search_lib
from t2t_jax.serve import app as app_lib
from t2t_jax.serve import engines

import extras as extras_lib
from processes import LINES
from fake_engine import request, running, wait_until


@contextlib.contextmanager
def _compilations():
  """The names of JAX's tracing, lowering and compiling events while inside, in a list."""
  seen = []

  def listen(event, _seconds, **_):
    if event.startswith("/jax/core/compile/"):
      seen.append(event)

  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    yield seen
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)


def test_requests_of_the_warmed_shapes_compile_nothing_once_health_is_ready(trained_workdir):
  jax.clear_caches()   # what earlier tests of this process compiled would hide a missing warm-up
  translator = inference.Translator(trained_workdir)
  engine = engines.JaxEngine(translator, batch_size=2)
  settings = engines.Settings(beam_size=translator.cfg.beam_size)
  app = app_lib.create_app(engine, app_lib.Options(max_batch=2, max_wait=0.05),
                           warm_up=lambda: engine.warm_up(6, settings))   # LINES: <= 6 pieces
  with running(app) as address:
    wait_until(lambda: request(address, "GET", "/health")[0] == 200, "ready")
    with _compilations() as seen, concurrent.futures.ThreadPoolExecutor(4) as pool:
      # One line alone and two at once: both row counts of --max_batch 2.
      groups = [LINES[:1], LINES[1:3], LINES[3:4], LINES[4:6]]
      answers = list(pool.map(
          lambda g: request(address, "POST", "/v1/translate", {"text": g}), groups))
  assert [status for status, _, _ in answers] == [200] * len(groups)
  assert seen == []


def test_both_engines_bound_each_output_by_max_len_a_and_agree(trained_workdir):
  extras_lib.skip_if_missing("export", "ctranslate2")
  # alpha 0: the engines' length penalties agree, so their outputs may be compared.
  translator = inference.Translator(trained_workdir, alpha=0.0, max_decode_extra=1)
  lines = LINES[:4] + ["They wait. We sleep. She is rich. He plays."]
  # Tokens (EOS included) of each output at most; one cut at its limit ends without EOS.
  limits = [math.ceil(0.5 * len(translator.tokenizer.encode(line))) + 1 for line in lines]
  settings = engines.Settings(beam_size=4)
  texts = {}
  for engine in (engines.JaxEngine(translator, batch_size=8, max_len_a=0.5),
                 engines.CTranslate2Engine.from_workdir(trained_workdir, translator, batch_size=8,
                                                        max_len_a=0.5)):
    texts[engine.name] = [t.text for t in engine.translate(lines, settings)]
    pieces = [len(translator.tokenizer.encode(text)) - 1 for text in texts[engine.name]]
    assert all(0 < n <= limit for n, limit in zip(pieces, limits)), (engine.name, pieces)
  assert texts["ctranslate2"] == texts["jax"]


def test_the_ctranslate2_engine_asks_for_our_limits_and_min_len(trained_workdir):
  extras_lib.skip_if_missing("export", "ctranslate2")
  translator = inference.Translator(trained_workdir)
  engine = engines.CTranslate2Engine.from_workdir(trained_workdir, translator, batch_size=8,
                                                  max_len_a=1.5)
  calls, model = [], engine.model

  class Recorder:   # what the engine asks of CTranslate2, then the answer
    def translate_batch(self, pieces, **options):
      calls.append((len(pieces), options))
      return model.translate_batch(pieces, **options)

  engine.model = Recorder()
  lines = LINES[:3]
  engine.translate(lines, engines.Settings(beam_size=4))
  search = search_lib.Search.from_config(translator.cfg, max_len_a=1.5)
  limits = [search_lib.output_limits(np.ones((1, len(translator.tokenizer.encode(line))), np.int32),
                                search.max_decode_extra, 1.5, translator.cfg.max_len)[1][0]
            for line in lines]
  asked = sorted(limit for n, options in calls for limit in [options["max_decoding_length"]] * n)
  assert asked == sorted(limits)
  assert all(options["min_decoding_length"] == search.min_len >= 1 for _, options in calls)
