"""serve/protocol.py: bad input becomes one ApiError with its HTTP status and one line naming
the field, the line or the limit (the answers over HTTP: tests/serve/test_app.py)."""

import pytest

from t2t_jax.serve import protocol

LIMITS = protocol.Limits(max_lines=2, max_chars=5, max_beam=4)


def _refusal(call, *args):
  with pytest.raises(protocol.ApiError) as e:
    call(*args)
  assert "\n" not in e.value.message
  return e.value.status, e.value.message


def test_bodies_that_are_not_utf8_json_are_400():
  assert protocol.parse_json(b'{"text": ["a"]}') == {"text": ["a"]}
  assert _refusal(protocol.parse_json, b'{"text": "\xff"}') == (
      400, "the request body is not valid UTF-8 (byte 10)")
  status, message = _refusal(protocol.parse_json, b'{"text": [')
  assert status == 400 and message.startswith("the request body is not valid JSON")


def test_a_wrong_field_is_422_naming_it():
  body = protocol.validate(protocol.TranslateRequest, {"text": ["a"], "n_best": 2})
  assert (body.text, body.n_best, body.beam_size) == (["a"], 2, None)
  assert _refusal(protocol.validate, protocol.TranslateRequest, {"text": ["a"], "beam": 2})[0] == 422
  status, message = _refusal(protocol.validate, protocol.TranslateRequest,
                             {"text": ["a"], "n_best": "2"})  # strict: no coercion
  assert status == 422 and message.startswith("n_best: ")


def test_lines_beyond_the_limits_or_with_control_characters_are_refused():
  protocol.check_lines(["abcde", "a\tb"], LIMITS)  # a tab is allowed
  assert _refusal(protocol.check_lines, ["a", "b", "c"], LIMITS) == (
      413, "3 lines in one request; the limit is 2 (max_lines): send them in several requests")
  assert _refusal(protocol.check_lines, ["a", "abcdef"], LIMITS) == (
      413, "line 2 has 6 characters; the limit is 5 (max_chars)")
  for bad, code in (("a\nb", "U+000A"), ("\x1b", "U+001B"), ("\ud800", "U+D800")):
    status, message = _refusal(protocol.check_lines, ["ok", bad], LIMITS)
    assert status == 422 and message.startswith(f"line 2 holds the control character or lone "
                                                f"surrogate {code}")


def test_a_beam_above_the_servers_limit_is_422():
  protocol.check_beam(None, LIMITS)
  protocol.check_beam(4, LIMITS)
  assert _refusal(protocol.check_beam, 5, LIMITS) == (
      422, "beam_size=5 is above the server's limit of 4 (max_beam)")


def test_json_that_python_would_take_but_a_client_should_not_send_is_400():
  for body, message in (
      (b'{"text": ["a"], "n_best": NaN}', "NaN is not JSON"),
      (b'{"n_best": [-Infinity]}', "-Infinity is not JSON"),
      (b'{"text": ["a"], "n_best": 1, "text": ["b"]}', 'the key "text" appears twice'),
      (b'{"n_best": ' + b"1" * 41 + b"}", "a number of 41 characters; the limit is 40"),
      (b'{"n_best": 0.' + b"5" * 40 + b"}", "a number of 42 characters"),
      (b"[" * 100_000 + b"]" * 100_000, "the request body's JSON nests too deeply")):
    status, got = _refusal(protocol.parse_json, body)
    assert status == 400 and got.startswith(message), got
  assert protocol.parse_json(b'{"n_best": ' + b"1" * 40 + b', "x": [[1.5]]}') == {
      "n_best": int("1" * 40), "x": [[1.5]]}


def test_a_body_not_declared_json_is_415():
  for declared in (None, "application/json", "Application/JSON; charset=utf-8"):
    protocol.check_content_type(declared)
  assert _refusal(protocol.check_content_type, "text/plain") == (
      415, "the request body must be JSON (Content-Type: application/json), not text/plain")


def test_what_a_client_sent_stays_one_printable_line_in_the_error():
  assert protocol.ApiError(422, 'x\ny\ud800: Extra inputs').message == (
      "x\\ny\\ud800: Extra inputs")
  long = protocol.ApiError(422, "k" * 10_000).message
  assert len(long) == protocol.MAX_MESSAGE and long.endswith("...")
  status, message = _refusal(protocol.validate, protocol.TranslateRequest,
                             {"text": ["a"], "a\u2028b": 1})
  assert (status, message) == (422, "a\\u2028b: Extra inputs are not permitted")
