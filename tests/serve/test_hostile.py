"""`t2t-serve` against a hostile client (the fake engine's server, tests/serve/fake_server.py, in
a process of its own): every malformed request gets a 4xx and its one-line {"error"}, a client
that leaves early costs one line of log, the server keeps serving, and its log holds no
traceback."""

import http.client
import json
import pathlib
import re
import socket
import time

import pytest

from t2t_jax.serve import protocol

import processes
from fake_engine import WAIT, request, wait_until
from fake_server import BODY_TIMEOUT

JSON = "application/json"
GOOD = json.dumps({"text": ["a"]}).encode()
DEEP = 100_000     # nesting levels: far past Python's recursion limit
LEFT = "client left before"   # what the server logs for a client gone before its answer


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
  """(process, gate): the server, whose batches wait while the file `gate` is missing; once
  stopped, its log must hold no traceback."""
  gate = tmp_path_factory.mktemp("hostile") / "gate"
  gate.touch()
  process = processes.start(["tests/serve/fake_server.py", str(gate)])
  yield process, gate
  assert process.stop() == 0, "".join(process.log[-20:])
  _no_traceback(process.log)


@pytest.fixture
def server(shared):
  """(process, gate, since): the shared server and the length of its log before the test."""
  process, gate = shared
  return process, gate, len(process.log)


def _no_traceback(log: list[str]) -> None:
  text = "".join(log)
  assert "Traceback" not in text and "Exception in ASGI application" not in text, text[-3000:]


def _post(address, body: bytes, content_type: str = JSON, path: str = "/v1/translate"):
  connection = http.client.HTTPConnection(*address, timeout=WAIT)
  connection.request("POST", path, body=body, headers={"Content-Type": content_type})
  response = connection.getresponse()
  answer = response.read()
  connection.close()
  return response.status, answer


def _one_line_error(answer: bytes) -> str:
  error = json.loads(answer)
  assert list(error) == ["error"] and "\n" not in error["error"], error
  return error["error"]


def _still_serving(process, since: int) -> None:
  """A good request is answered, and the log holds no traceback since `since`."""
  assert request(process.address, "POST", "/v1/translate", {"text": ["a"]})[0] == 200
  _no_traceback(process.log[since:])


BAD = [
    ("deeply nested JSON", JSON, b"[" * DEEP + b"]" * DEEP, 400, "nests too deeply"),
    ("a field nested deeply", JSON, b'{"text": ' + b"[" * DEEP + b"]" * DEEP + b"}", 400,
     "nests too deeply"),
    ("NaN", JSON, b'{"text": ["a"], "beam_size": NaN}', 400, "NaN is not JSON"),
    ("-Infinity", JSON, b'{"text": ["a"], "n_best": -Infinity}', 400, "-Infinity is not JSON"),
    ("a number of 5000 digits", JSON, b'{"text": ["a"], "beam_size": ' + b"9" * 5000 + b"}",
     400, "a number of 5000 characters"),
    ("a number past float's range", JSON, b'{"text": ["a"], "beam_size": 1e999}', 422,
     "beam_size: Input should be a valid integer"),
    ("a key twice", JSON, b'{"text": ["a"], "text": ["b"]}', 400, 'the key "text" appears twice'),
    ("a list, not an object", JSON, b'["a"]', 422, "body: Input should be a valid dictionary"),
    ("null", JSON, b"null", 422, "body: Input should be a valid dictionary"),
    ("an object for the lines", JSON, b'{"text": {"a": 1}}', 422,
     "text: Input should be a valid list"),
    ("a key with a line break", JSON, b'{"text": ["a"], "x\\ny": 1}', 422,
     "x\\ny: Extra inputs are not permitted"),
    ("a key with a lone surrogate", JSON, b'{"text": ["a"], "\\ud800": 1}', 422,
     "Input should be a valid string"),
    ("invalid UTF-8", JSON, b'{"text": ["\xc3\x28"]}', 400, "not valid UTF-8"),
    ("truncated JSON", JSON, b'{"text": ["a"', 400, "not valid JSON"),
    ("no body", JSON, b"", 400, "not valid JSON"),
    ("text/plain", "text/plain", GOOD, 415, "not text/plain"),
    ("a form, as curl -d sends", "application/x-www-form-urlencoded", GOOD, 415,
     "not application/x-www-form-urlencoded"),
    ("a body past the limit", JSON, json.dumps({"text": ["x" * 4_000_000]}).encode(), 413,
     "the request body has"),
]


@pytest.mark.parametrize("content_type,body,status,message", [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_a_malformed_request_gets_a_4xx_and_one_line(server, content_type, body, status,
                                                     message):
  process, _, since = server
  got, answer = _post(process.address, body, content_type)
  assert got == status, answer[:200]
  assert message in _one_line_error(answer)
  _still_serving(process, since)


def test_the_routes_behind_fastapi_refuse_the_same_way(server):
  process, _, since = server
  got, answer = _post(process.address, b"[" * DEEP + b"]" * DEEP, path="/v1/attention")
  assert got == 400 and "nests too deeply" in _one_line_error(answer)
  got, answer = _post(process.address, GOOD, "text/plain", path="/v1/attention")
  assert got == 415 and _one_line_error(answer)
  for method, path in (("PUT", "/v1/translate"), ("DELETE", "/v1/translate"),
                       ("POST", "/docs"), ("POST", "/health")):
    status, _, answer = request(process.address, method, path, raw=GOOD)
    assert (status, answer) == (405, {"error": "Method Not Allowed"})
  _still_serving(process, since)


def _send(address, data: bytes) -> socket.socket:
  sock = socket.create_connection(address, timeout=WAIT)
  sock.sendall(data)
  return sock


def _head(content_length: int, path: str = "/v1/translate") -> bytes:
  return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % (path.encode(), content_length))


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
  response = http.client.HTTPResponse(sock)
  response.begin()
  return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()


@pytest.mark.parametrize("data", [_head(5) + GOOD, b"NOT HTTP\r\n\r\n"],
                         ids=["a Content-Length shorter than the body", "not HTTP"])
def test_bytes_past_the_body_or_not_http_get_400_and_one_line(server, data):
  process, _, since = server
  with _send(process.address, data) as sock:
    status, _, answer = _answer(sock)
  assert status == 400 and _one_line_error(answer)
  _still_serving(process, since)


def test_a_content_length_longer_than_the_body_gets_408_once_no_byte_comes(server):
  process, _, since = server
  with _send(process.address, _head(len(GOOD) + 10) + GOOD) as sock:
    status, headers, answer = _answer(sock)
    assert status == 408 and headers["connection"] == "close"
    assert f"for {BODY_TIMEOUT:g} s" in _one_line_error(answer)
    assert sock.recv(1) == b""      # the server closed the connection
  _still_serving(process, since)


def test_a_slow_body_whose_bytes_keep_coming_is_served(server):
  process, _, since = server
  pieces = [GOOD[:5], GOOD[5:10], GOOD[10:]]
  with _send(process.address, _head(len(GOOD))) as sock:
    for piece in pieces:      # longer than BODY_TIMEOUT in all, never that long without a byte
      time.sleep(BODY_TIMEOUT * 0.6)
      sock.sendall(piece)
    assert _answer(sock)[0] == 200
  _still_serving(process, since)


def _left(process) -> list[str]:
  return [line for line in process.log if LEFT in line]


@pytest.mark.parametrize("path", ["/v1/translate", "/v1/attention"])
@pytest.mark.parametrize("leave", [lambda s: s.shutdown(socket.SHUT_WR), socket.socket.close],
                         ids=["half-closed", "closed"])
def test_a_client_that_leaves_mid_body_is_one_line_of_log(server, leave, path):
  process, _, since = server
  before = len(_left(process))
  sock = _send(process.address, _head(100, path) + b'{"text": ["a')
  leave(sock)
  wait_until(lambda: len(_left(process)) == before + 1, "one line of log for the client")
  assert "bytes of its request body" in _left(process)[-1]
  sock.close()
  _still_serving(process, since)


def test_a_body_streamed_past_the_limit_gets_413_before_it_ends(server):
  process, _, since = server
  limit = protocol.Limits().max_body    # the fake server's
  chunk = b"[" * 65536
  head = (b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Transfer-Encoding: chunked\r\n\r\n")
  with _send(process.address, head) as sock:
    for _ in range(limit // len(chunk) + 2):   # never the last, empty chunk
      sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    status, _, answer = _answer(sock)
  assert status == 413 and f"the limit of {limit} bytes" in _one_line_error(answer)
  _still_serving(process, since)


def _queued(process) -> float:
  _, _, metrics = request(process.address, "GET", "/metrics")
  return float(re.search(r"^t2t_queue_lines (\S+)$", metrics, re.M).group(1))


def test_clients_that_leave_while_decoding_or_queued_are_one_line_each(server):
  process, gate, since = server
  started = pathlib.Path(f"{gate}.started")
  gate.unlink()
  started.unlink(missing_ok=True)
  before = len(_left(process))
  try:
    body = json.dumps({"text": ["decoding"]}).encode()
    decoding = _send(process.address, _head(len(body)) + body)
    wait_until(started.exists, "the batch started")
    body = json.dumps({"text": ["q1", "q2"]}).encode()
    queued = _send(process.address, _head(len(body)) + body)
    wait_until(lambda: _queued(process) == 2, "2 lines queued")
    queued.close()
    wait_until(lambda: _queued(process) == 0, "the gone client's lines leave the queue")
    decoding.close()
    wait_until(lambda: len(_left(process)) == before + 2, "one line of log for each client")
  finally:
    gate.touch()
  assert all("before its answer" in line for line in _left(process)[before:])
  _still_serving(process, since)
