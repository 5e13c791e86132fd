"""The engines on the trained test model: a warmed-up server compiles nothing for a request;
both engines bound each output by our one length rule."""

import concurrent.futures
import contextlib
import math
import shutil
import threading

import jax
import numpy as np

from t2t_jax import inference
from t2t_jax.inference import shortlist
from t2t_jax.ids import EOS_ID, FILLER
from t2t_jax.serve import app as app_lib
from t2t_jax.serve import engines
from t2t_jax.decoding import batch_decoder

import extras as extras_lib
from processes import LINES
from fake_engine import request, running, wait_until


@contextlib.contextmanager
def _compilations():
  """JAX's tracing, lowering and compiling events while inside, as (thread name, event), in a
  list."""
  seen = []

  def listen(event, _seconds, **_):
    if event.startswith("/jax/core/compile/"):
      seen.append((threading.current_thread().name, event))

  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    yield seen
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)


def test_requests_compile_nothing_once_health_is_ready_nor_while_the_rest_compiles(
    trained_workdir):
  jax.clear_caches()   # what earlier tests of this process compiled would hide a missing warm-up
  translator = inference.Translator(trained_workdir)
  engine = engines.JaxEngine(translator, batch_size=2)
  settings = engines.Settings(beam_size=translator.cfg.beam_size)
  assert engine.shapes(6) == [(1, 8), (2, 8)]     # LINES: <= 6 pieces
  go_on = threading.Event()
  app = app_lib.create_app(
      engine, app_lib.Options(max_batch=2, max_wait=0.05),
      warm_up=lambda stop: engine.warm_up(6, settings, count=1, stop=stop),
      background=lambda stop: go_on.wait(60) and engine.warm_up(6, settings, skip=1, stop=stop))
  # One line alone and two at once: both row counts of --max_batch 2.
  groups = [LINES[:1], LINES[1:3], LINES[3:4], LINES[4:6]]
  expected = translator.translate(LINES[:6])
  with running(app) as address, _compilations() as seen:
    wait_until(lambda: request(address, "GET", "/health")[0] == 200, "ready")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
      # While [2, 8] waits to compile, two lines decode in [1, 8], one after the other.
      before = list(pool.map(
          lambda g: request(address, "POST", "/v1/translate", {"text": g}), groups))
      go_on.set()
      wait_until(lambda: request(address, "GET", "/health")[2]["warm"], "warm")
      after = list(pool.map(
          lambda g: request(address, "POST", "/v1/translate", {"text": g}), groups))
  for answers in (before, after):
    assert [status for status, _, _ in answers] == [200] * len(groups)
    assert [t["text"] for _, _, body in answers for t in body["translations"]] == expected
  assert [event for thread, event in seen if thread != "t2t_jax-warm-up"] == []
  assert any(thread == "t2t_jax-warm-up" for thread, _ in seen)   # [2, 8] compiled meanwhile
  stop = threading.Event()
  stop.set()
  assert engine.warm_up(6, settings, stop=stop) == 0      # no shape once the server stops


def test_with_a_shortlist_the_warm_up_compiles_what_requests_use_and_they_translate_alike(
    trained_workdir, tmp_path):
  workdir = tmp_path / "run"
  shutil.copytree(trained_workdir, workdir)
  # 100 random entries a source piece: a line's list is longer than the 256 that the lists
  # of no line (a warm-up's filler rows) take, and than a smaller vocabulary's.
  rng = np.random.default_rng(4)
  vocab_size = inference.load_tokenizer(workdir).vocab_size
  entries = np.stack([rng.choice(np.arange(3, vocab_size), 100, replace=False)
                      for _ in range(vocab_size)]).astype(np.int32)
  entries[:3] = FILLER                                       # no entries for special pieces
  table = shortlist.Shortlist(entries, np.arange(3, 9, dtype=np.int32),
                              shortlist.spm_sha256(workdir / "vocab" / "spm.model"))
  assert len(table.batch_ids(np.zeros((1, 8), np.int32))) < len(table.batch_ids(
      np.asarray([[*range(5, 15), EOS_ID]])))
  shortlist.save(table, workdir / shortlist.FILE)
  groups = (LINES[:1], LINES[1:3], LINES[3:4], LINES[4:6])
  # t2t-translate's, batch by batch: a batch's candidates are its own lines'.
  direct = inference.Translator(workdir, shortlist=True)
  expected = [direct.translate(group, batch_size=2) for group in groups]
  jax.clear_caches()
  translator = inference.Translator(workdir, shortlist=True)
  engine = engines.JaxEngine(translator, batch_size=2)
  settings = engines.Settings(beam_size=translator.cfg.beam_size)
  assert engine.warm_up(6, settings) > 0
  with _compilations() as seen:
    got = [[t.text for t in engine.translate(group, settings)] for group in groups]
  assert not seen and got == expected


def test_a_batch_pads_into_the_cheapest_shape_compiled(trained_workdir):
  translator = inference.Translator(trained_workdir)
  engine = engines.JaxEngine(translator, batch_size=64)
  widest = min(translator.cfg.max_len, 128)
  assert engine.shapes(translator.cfg.max_len)[:3] == [(1, widest), (64, widest), (8, widest)]
  compiled = [(1, widest), (64, widest), (8, widest)]
  sources = [[5, 6, 7]] * 3                                  # [4 rows, 8 positions] unpadded
  assert engine._padded(compiled, sources).shape == (8, widest)
  # Fewer rows beat a narrower shape: every row is decoded at every step.
  compiled.append((64, 16))
  assert engine._padded(compiled, sources).shape == (8, widest)
  assert engine._padded(compiled + [(8, 16)], sources).shape == (8, 16)
  assert engine._padded(compiled, sources[:1]).shape == (1, widest)
  padded = engine._padded(compiled, [[5, 6, 7]] * 9)
  assert padded.shape == (64, 16)
  assert (padded[:9, :4] == [5, 6, 7, EOS_ID]).all()
  assert not padded[9:].any() and not padded[:, 4:].any()
  assert engine._padded([], sources).shape == (4, 8)        # nothing compiled: source_rows


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


def _recorded(engine: engines.CTranslate2Engine) -> list[tuple[int, dict]]:
  """What the engine asks of CTranslate2 from now on: (lines, options) per translate_batch."""
  calls, model = [], engine.model

  class Recorder:
    def translate_batch(self, pieces, **options):
      calls.append((len(pieces), options))
      return model.translate_batch(pieces, **options)

  engine.model = Recorder()
  return calls


def _limits(translator: inference.Translator, lines: list[str], max_len_a: float) -> list[int]:
  search = batch_decoder.Search.from_config(translator.cfg, max_len_a=max_len_a)
  return [batch_decoder.output_limits(np.ones((1, len(translator.tokenizer.encode(line))), np.int32),
                              search.max_decode_extra, max_len_a, translator.cfg.max_len)[1][0]
          for line in lines]


def test_the_ctranslate2_engine_decodes_a_batch_in_one_call_under_its_longest_limit(
    trained_workdir):
  extras_lib.skip_if_missing("export", "ctranslate2")
  translator = inference.Translator(trained_workdir)
  engine = engines.CTranslate2Engine.from_workdir(trained_workdir, translator, batch_size=8,
                                                  max_len_a=1.5)
  calls = _recorded(engine)
  lines = LINES[:3] + ["They wait. We sleep. She is rich. He plays."]   # limits of 2 lengths
  engine.translate(lines, engines.Settings(beam_size=4))
  search = batch_decoder.Search.from_config(translator.cfg, max_len_a=1.5)
  # The outputs end well before their limits (input + 50): nothing is decoded again.
  assert [(n, options["max_decoding_length"]) for n, options in calls] == [
      (len(lines), max(_limits(translator, lines, 1.5)))]
  assert calls[0][1]["min_decoding_length"] == search.min_len >= 1


def test_the_ctranslate2_engine_decodes_again_under_its_own_limit_a_line_cut_at_it(
    trained_workdir):
  extras_lib.skip_if_missing("export", "ctranslate2")
  translator = inference.Translator(trained_workdir, max_decode_extra=1)
  engine = engines.CTranslate2Engine.from_workdir(trained_workdir, translator, batch_size=8,
                                                  max_len_a=0.5)
  calls = _recorded(engine)
  lines = LINES[:2] + ["They wait. We sleep. She is rich. He plays."]
  limits = _limits(translator, lines, 0.5)
  assert limits[0] < limits[-1]
  engine.translate(lines, engines.Settings(beam_size=4))
  # Every line is cut at the longest limit or its own; those with a shorter one go again.
  asked = [(n, options["max_decoding_length"]) for n, options in calls]
  again = sorted(limit for limit in limits if limit < max(limits))
  assert asked[0] == (len(lines), max(limits))
  assert sorted(limit for n, limit in asked[1:] for _ in range(n)) == again


def test_the_ctranslate2_engine_translates_a_batch_per_worker_at_once(trained_workdir):
  extras_lib.skip_if_missing("export", "ctranslate2")
  translator = inference.Translator(trained_workdir)
  engine = engines.CTranslate2Engine.from_workdir(trained_workdir, translator, batch_size=8,
                                                  workers=2)
  settings = engines.Settings(beam_size=4)
  alone = [[t.text for t in engine.translate(batch, settings)] for batch in (LINES[:3], LINES[3:6])]
  model, inside, both = engine.model, [0], threading.Barrier(2, timeout=60)

  class Overlapping:
    """Each call waits inside until the other batch's call is inside too."""
    def translate_batch(self, pieces, **options):
      inside[0] += 1
      both.wait()
      return model.translate_batch(pieces, **options)

  assert model.num_translators == 2                 # a replica per batch in flight
  engine.model = Overlapping()
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    together = list(pool.map(lambda batch: [t.text for t in engine.translate(batch, settings)],
                             (LINES[:3], LINES[3:6])))
  assert together == alone and inside[0] == 2
