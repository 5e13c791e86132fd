"""`t2t-serve` as a process: the trained model's lines as t2t-translate gives them, both engines,
the attention maps, and a graceful exit on SIGTERM."""

import concurrent.futures
import pathlib
import re
import signal
import socket
import threading

from t2t_jax import inference

import extras as extras_lib
import processes
from processes import LINES
from fake_engine import WAIT, request, wait_until


def _translate(address, lines, **settings):
  status, _, answer = request(address, "POST", "/v1/translate", {"text": lines, **settings})
  assert status == 200, answer
  return answer["translations"]


def _sentences(address) -> float:
  """The server's count of translated lines (the server is shared by the tests)."""
  _, _, metrics = request(address, "GET", "/metrics")
  return float(re.search(r"^t2t_sentences_total (\S+)$", metrics, re.M).group(1))


def test_concurrent_requests_get_the_translation_each_line_gets_alone(jax_server, trained_workdir):
  groups = [LINES[k:k + 2] for k in range(0, len(LINES), 2)] + [LINES[:1]] * 2
  before = _sentences(jax_server.address)
  with concurrent.futures.ThreadPoolExecutor(len(groups)) as pool:
    answers = list(pool.map(lambda g: _translate(jax_server.address, g), groups))
  translator = inference.Translator(trained_workdir)
  alone = {line: translator.translate([line])[0] for line in LINES}
  for group, answer in zip(groups, answers):
    assert [t["text"] for t in answer] == [alone[line] for line in group]
  assert _sentences(jax_server.address) == before + 10


def test_the_attention_map_covers_the_pieces_and_its_alignment_the_words(jax_server):
  status, _, answer = request(jax_server.address, "POST", "/v1/attention",
                              {"source": "We sleep.", "target": "Wir schlafen.", "layer": 0,
                               "head": 1})
  assert status == 200, answer
  weights = answer["weights"]
  assert len(weights) == len(answer["target_pieces"]) and answer["target_pieces"][-1] == "</s>"
  assert all(len(row) == len(answer["source_pieces"]) for row in weights)
  assert all(abs(sum(row) - 1) < 1e-2 for row in weights)          # a softmax over the source
  assert {i for i, _ in answer["alignment"]} <= set(answer["source_words"])
  status, _, answer = request(jax_server.address, "POST", "/v1/attention",
                              {"source": "We sleep.", "target": "Wir.", "layer": 5})
  assert status == 422 and "layer=5 does not exist" in answer["error"]


def test_the_ctranslate2_engine_exports_on_first_use_and_agrees_without_length_penalty(
    trained_workdir, tmp_path):
  extras_lib.skip_if_missing("export", "ctranslate2")
  workdir = pathlib.Path(trained_workdir)
  server = processes.start(["-m", "t2t_jax.cli.serve", "--workdir", str(workdir), "--port", "0",
                            "--engine", "ctranslate2", "--alpha", "0", "--warmup_pieces", "0"])
  try:
    answer = _translate(server.address, LINES[:4] + [""], n_best=2)
    assert (workdir / "ctranslate2" / "model.bin").is_file()
  finally:
    assert server.stop() == 0
  translator = inference.Translator(workdir, alpha=0.0)
  assert [t["text"] for t in answer] == [translator.translate([line])[0]
                                         for line in LINES[:4]] + [""]
  assert all(len(t["nbest"]) == 2 for t in answer[:4])


def test_sigterm_answers_the_request_under_way_then_exits_0(tmp_path):
  gate = tmp_path / "gate"
  server = processes.start(["tests/serve/fake_server.py", str(gate)])
  answers = []
  client = threading.Thread(target=lambda: answers.append(
      request(server.address, "POST", "/v1/translate", {"text": ["a", "b"]})))
  client.start()
  wait_until(lambda: pathlib.Path(f"{gate}.started").exists(), "the batch started")
  server.proc.send_signal(signal.SIGTERM)

  def refused():
    try:
      socket.create_connection(server.address, timeout=1).close()
      return False
    except OSError:
      return True

  wait_until(refused, "new connections refused")
  gate.touch()
  client.join(WAIT)
  assert answers[0][0] == 200 and [t["text"] for t in answers[0][2]["translations"]] == [
      "A 0", "B 0"]
  assert server.stop() == 0
