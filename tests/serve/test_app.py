"""The HTTP front with a fake engine: answers, bad input, overload, disconnects, readiness."""

import json
import socket
import threading

import pytest

from t2t_jax.serve import app as app_lib
from t2t_jax.serve import protocol

from fake_engine import WAIT, FakeEngine, request, running, wait_until

LIMITS = protocol.Limits(max_lines=4, max_chars=20, max_beam=8)


def _server(engine, **options):
  options = {"max_batch": 4, "max_queue": 6, "max_wait": 0.0, "workers": 1, "limits": LIMITS,
             **options}
  return app_lib.create_app(engine, app_lib.Options(**options))


def test_each_line_gets_its_translation_and_n_best_list_in_order(shared):
  status, _, answer = request(shared, "POST", "/v1/translate", {"text": ["a b", "c"], "n_best": 2})
  assert status == 200
  assert [t["text"] for t in answer["translations"]] == ["A B 0", "C 0"]
  assert [[h["text"], h["score"]] for h in answer["translations"][1]["nbest"]] == [
      ["C 0", 0.0], ["C 1", -1.0]]


BAD = [
    (b'{"text": ["a"', 400, "not valid JSON"),
    (b'{"text": ["\xff"]}', 400, "not valid UTF-8"),
    (b'{"text": "a line"}', 422, "text: Input should be a valid list"),
    (b'{"text": [1]}', 422, "text.0: Input should be a valid string"),
    (b'{"text": []}', 422, "text: List should have at least 1 item"),
    (b'{"text": ["a"], "beam": 4}', 422, "beam: Extra inputs are not permitted"),
    (b'{"text": ["a"], "beam_size": "4"}', 422, "beam_size: Input should be a valid integer"),
    (b'{"text": ["a\\u0007b"]}', 422, "line 1 holds the control character or lone surrogate U+0007"),
    (b'{"text": ["ok", "a\\nb"]}', 422, "line 2 holds the control character or lone surrogate U+000A"),
    (b'{"text": ["\\ud800"]}', 422, "lone surrogate U+D800"),
    (b'{"text": ["a", "b", "c", "d", "e"]}', 413, "5 lines in one request; the limit is 4 (max_lines)"),
    (json.dumps({"text": ["x" * 21]}).encode(), 413, "line 1 has 21 characters; the limit is 20"),
    (json.dumps({"text": ["x" * 100_000]}).encode(), 413, "the request body has"),
    (b'{"text": ["a"], "beam_size": 9}', 422, "beam_size=9 is above the server's limit of 8"),
    (b'{"text": ["a"], "beam_size": 2, "n_best": 3}', 422, "n_best=3 must be <= beam_size=2"),
]


@pytest.fixture(scope="module")
def shared():
  """One server for the tests that leave nothing behind in it."""
  with running(_server(FakeEngine())) as address:
    yield address


@pytest.mark.parametrize("body,status,message", BAD, ids=[m for _, _, m in BAD])
def test_bad_input_gets_a_one_line_json_error_and_the_server_keeps_serving(shared, body, status,
                                                                          message):
  got, _, answer = request(shared, "POST", "/v1/translate", raw=body)
  assert (got, list(answer)) == (status, ["error"])
  assert message in answer["error"] and "\n" not in answer["error"]
  assert request(shared, "POST", "/v1/translate", {"text": ["a"]})[0] == 200


class LanguageEngine(FakeEngine):
  """Needs each source to start with a language token, as a multilingual model's tokenizer."""

  def source_tokens(self, line: str) -> int:
    if not line.startswith(">>"):
      raise ValueError("this model needs a target language token at the start of each source "
                       "(>>deu<<, >>nld<<): it has none")
    return super().source_tokens(line)


def test_a_line_the_tokenizer_refuses_is_a_422_naming_why():
  with running(_server(LanguageEngine())) as address:
    status, _, answer = request(address, "POST", "/v1/translate", {"text": [">>deu<< a", "b"]})
    assert status == 422 and answer["error"].endswith("(>>deu<<, >>nld<<): it has none")
    status, _, answer = request(address, "POST", "/v1/translate", {"text": [">>deu<< a"]})
    assert status == 200 and answer["translations"][0]["text"] == ">>DEU<< A 0"


def test_the_model_answer_counts_the_decoders_layers(shared):
  # The page offers the decoder's layers for its attention maps: a decoder of its own depth.
  status, _, answer = request(shared, "GET", "/v1/model")
  assert status == 200 and (answer["num_layers"], answer["num_heads"]) == (2, 4)


def test_unknown_routes_and_methods_answer_json_errors(shared):
  assert request(shared, "GET", "/v2/nothing")[::2] == (404, {"error": "Not Found"})
  assert request(shared, "GET", "/v1/translate")[::2] == (405, {"error": "Method Not Allowed"})


def test_a_full_queue_answers_503_with_retry_after_and_serves_again_once_drained():
  engine = FakeEngine()
  app = _server(engine)
  with running(app) as address:
    engine.gate.clear()
    answers = []
    first = threading.Thread(target=lambda: answers.append(
        request(address, "POST", "/v1/translate", {"text": ["busy"]})))
    first.start()
    assert engine.started.wait(WAIT)
    queued = threading.Thread(target=lambda: answers.append(
        request(address, "POST", "/v1/translate", {"text": ["q1", "q2", "q3", "q4"]})))
    queued.start()
    wait_until(lambda: app.state.server.batcher.queued == 4, "4 lines queued")
    status, headers, answer = request(address, "POST", "/v1/translate", {"text": ["x", "y", "z"]})
    assert status == 503 and headers["retry-after"] == "1" and "overloaded" in answer["error"]
    engine.gate.set()
    first.join(WAIT)
    queued.join(WAIT)
    assert sorted(a[0] for a in answers) == [200, 200]
    assert request(address, "POST", "/v1/translate", {"text": ["x", "y", "z"]})[0] == 200
    _, _, metrics = request(address, "GET", "/metrics")
  assert 't2t_requests_total{status="503"} 1.0' in metrics
  assert "t2t_sentences_total 8.0" in metrics


def test_a_client_that_disconnects_frees_its_queued_lines():
  engine = FakeEngine()
  app = _server(engine)
  batcher = app.state.server.batcher
  with running(app) as address:
    engine.gate.clear()
    busy = threading.Thread(target=request, args=(address, "POST", "/v1/translate",
                                                  {"text": ["busy"]}))
    busy.start()
    assert engine.started.wait(WAIT)
    body = json.dumps({"text": ["gone1", "gone2", "gone3"]}).encode()
    with socket.create_connection(address) as client:
      client.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
      wait_until(lambda: batcher.queued == 3, "the request's 3 lines queued")
    wait_until(lambda: batcher.queued == 0, "the lines of the gone client leave the queue")
    engine.gate.set()
    busy.join(WAIT)
    assert all(not line.startswith("gone") for batch in engine.batches for line in batch)


def test_health_and_requests_answer_503_until_the_warm_up_is_done():
  warm = threading.Event()
  app = app_lib.create_app(FakeEngine(), warm_up=lambda _: warm.wait(WAIT))
  with running(app) as address:
    assert request(address, "GET", "/health")[::2] == (503, {"status": "starting"})
    status, headers, _ = request(address, "POST", "/v1/translate", {"text": ["a"]})
    assert status == 503 and headers["retry-after"] == "1"
    warm.set()
    wait_until(lambda: request(address, "GET", "/health")[0] == 200, "ready")
    assert request(address, "POST", "/v1/translate", {"text": ["a"]})[0] == 200


def test_the_openapi_page_and_the_web_page_are_served(shared):
  _, _, schema = request(shared, "GET", "/openapi.json")
  assert "/v1/translate" in schema["paths"] and "/v1/attention" in schema["paths"]
  assert request(shared, "GET", "/docs")[0] == 200
  assert "<canvas id=\"heatmap\"" in request(shared, "GET", "/")[2]
  assert "drawHeatmap" in request(shared, "GET", "/static/app.js")[2]


def test_a_stopping_server_stops_its_background_warm_up_and_waits_for_it():
  # A warm-up thread left inside XLA's compiler when the process exits aborts it (SIGABRT).
  stopped = []
  app = app_lib.create_app(FakeEngine(), background=lambda stop: stopped.append(stop.wait(WAIT)))
  with running(app) as address:
    wait_until(lambda: request(address, "GET", "/health")[0] == 200, "ready")
    assert not stopped
  assert stopped == [True]
