"""An engine that answers at once (or when its gate opens), and a server running it in a thread.

The app's and the batcher's tests use it: what they check (batching, limits,
errors, disconnects, shutdown) does not depend on what decodes, and it needs
no compilation.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import types
from typing import Any, Iterator, Optional

import uvicorn

from t2t_jax.inference import streaming

WAIT = 60   # seconds: the bound of every wait in these tests (none is timed)


class FakeEngine:
  """Translates a line to its upper case; each batch waits for `gate` (open by default)."""

  name = "fake"
  cfg = types.SimpleNamespace(beam_size=4, num_layers=3, num_decoder_layers=2, num_heads=4)

  def __init__(self):
    self.gate = threading.Event()
    self.gate.set()
    self.started = threading.Event()   # set when a batch has started
    self.batches: list[list[str]] = []

  def check(self, settings) -> None:
    if settings.n_best > settings.beam_size:
      raise ValueError(f"n_best={settings.n_best} must be <= beam_size={settings.beam_size}")

  def count_pieces(self, text: str) -> int:
    return len(text.split())

  def source_tokens(self, line: str) -> int:
    return len(line.split()) + 1

  def translate(self, lines, settings) -> list[streaming.Translation]:
    self.batches.append(list(lines))
    self.started.set()
    assert self.gate.wait(WAIT)
    return [streaming.Translation(k, [streaming.Hypothesis(f"{line.upper()} {n}", -float(n))
                                      for n in range(settings.n_best)])
            for k, line in enumerate(lines)]


@contextlib.contextmanager
def running(app) -> Iterator[tuple[str, int]]:
  """Serves `app` on a free loopback port from a thread; yields (host, port)."""
  sock = socket.socket()
  sock.bind(("127.0.0.1", 0))
  server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
  thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
  thread.start()
  try:
    for _ in range(WAIT * 100):
      if server.started:
        break
      time.sleep(0.01)
    yield sock.getsockname()[:2]
  finally:
    server.should_exit = True
    thread.join(WAIT)


def request(address: tuple[str, int], method: str, path: str, body: Any = None,
            raw: Optional[bytes] = None) -> tuple[int, dict[str, str], Any]:
  """(status, headers, JSON or text) of one request; `body` is sent as JSON, `raw` as is."""
  connection = http.client.HTTPConnection(*address, timeout=WAIT)
  data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
  connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
  response = connection.getresponse()
  text = response.read().decode()
  connection.close()
  try:
    payload = json.loads(text)
  except json.JSONDecodeError:
    payload = text
  return response.status, dict(response.headers), payload


def wait_until(condition, what: str) -> None:
  """Polls `condition()` until true; fails naming `what` after WAIT seconds."""
  for _ in range(WAIT * 100):
    if condition():
      return
    time.sleep(0.01)
  raise AssertionError(f"not within {WAIT} s: {what}")
