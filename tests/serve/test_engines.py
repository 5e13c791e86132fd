"""The engines on the trained test model: a warmed-up server compiles nothing for a request."""

import concurrent.futures
import contextlib

import jax

from t2t_jax import inference
from t2t_jax.serve import app as app_lib
from t2t_jax.serve import engines

from conftest import LINES
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

