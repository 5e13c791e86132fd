"""serve/protocol.py: bad input becomes one ApiError with its HTTP status and one line naming
the field, the line or the limit (the answers over HTTP: tests/serve/test_app.py)."""

import pytest

pytest.importorskip("pydantic", reason="the serve extra: pip install -e '.[serve]'")

from t2t_jax.serve import protocol  # noqa: E402  (after the skip)

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
