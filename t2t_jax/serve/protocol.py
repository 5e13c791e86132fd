"""The API's requests and answers, and the checks that turn bad input into one-line errors.

    check_content_type(request.headers.get("content-type"))   # ApiError 415
    body = validate(TranslateRequest, parse_json(raw))        # ApiError 400 / 422
    check_lines(body.text, limits)                            # ApiError 413 / 422

Every refusal is an `ApiError`: an HTTP status and one line that names what is
wrong (the field, the line number, the limit), sent as {"error": "..."}.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import unicodedata
from typing import Any, Optional, Sequence

import pydantic


MAX_MESSAGE = 500       # characters of an error message: a client's field names may be long
MAX_NUMBER = 40         # characters of a JSON number: no field needs more


def _printable(message: str) -> str:
  """`message` as one printable line: what a client sent may hold line breaks or surrogates."""
  if not message.isprintable():
    message = "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in message)
  return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."


class ApiError(Exception):
  """A refused request: `status`, a one-line `message`, extra `headers`."""

  def __init__(self, status: int, message: str, headers: Optional[dict[str, str]] = None):
    message = _printable(message)
    super().__init__(message)
    self.status, self.message, self.headers = status, message, headers or {}


@dataclasses.dataclass(frozen=True)
class Limits:
  """What one request may ask for; beyond it the server answers 413 (sizes) or 422."""
  max_lines: int = 256          # lines per request
  max_chars: int = 2000         # characters per line
  max_beam: int = 16            # beam_size (each size is one more set of programs to compile)

  @property
  def max_body(self) -> int:
    """Bytes of a request body: every line at its longest, each character a 6-byte \\uXXXX escape."""
    return 64 * 1024 + self.max_lines * (self.max_chars * 6 + 16)


class TranslateRequest(pydantic.BaseModel):
  """POST /v1/translate. Unset settings take the model config's."""
  model_config = pydantic.ConfigDict(extra="forbid", strict=True)
  text: list[str] = pydantic.Field(min_length=1, description="the lines to translate")
  beam_size: Optional[int] = pydantic.Field(None, ge=1)
  n_best: int = pydantic.Field(1, ge=1, description="hypotheses per line, at most beam_size")
  alignments: bool = pydantic.Field(False, description="word alignments (source i, output j)")


class Hypothesis(pydantic.BaseModel):
  text: str
  score: float
  alignment: Optional[list[tuple[int, int]]] = None


class Translation(pydantic.BaseModel):
  text: str
  score: float
  nbest: list[Hypothesis]
  alignment: Optional[list[tuple[int, int]]] = None


class TranslateResponse(pydantic.BaseModel):
  translations: list[Translation]


class AttentionRequest(pydantic.BaseModel):
  """POST /v1/attention: our model's cross-attention for a (source, translation) pair."""
  model_config = pydantic.ConfigDict(extra="forbid", strict=True)
  source: str = pydantic.Field(min_length=1)
  target: str = pydantic.Field(min_length=1)
  layer: int = pydantic.Field(-1, description="decoder layer; negative counts from the end")
  head: Optional[int] = pydantic.Field(None, description="one head; null: their mean")


class Error(pydantic.BaseModel):
  error: str


def check_content_type(value: Optional[str]) -> None:
  """415 unless the body is declared JSON (or not declared at all)."""
  if value is not None and value.partition(";")[0].strip().lower() != "application/json":
    raise ApiError(415, f"the request body must be JSON (Content-Type: application/json), "
                        f"not {value}")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  value = dict(pairs)
  if len(value) < len(pairs):   # json.loads would keep the last silently
    counts = collections.Counter(key for key, _ in pairs)
    twice = next(key for key, count in counts.items() if count > 1)
    raise ApiError(400, f"the key {json.dumps(twice)} appears twice in one object")
  return value


def _short(number: str) -> str:
  # int() refuses (ValueError) or takes quadratic time over thousands of digits.
  if len(number) > MAX_NUMBER:
    raise ApiError(400, f"a number of {len(number)} characters; the limit is {MAX_NUMBER}")
  return number


def _int(number: str) -> int:
  return int(_short(number))


def _float(number: str) -> float:
  return float(_short(number))


def _constant(name: str) -> Any:
  raise ApiError(400, f"{name} is not JSON (RFC 8259): send a number or null")


def parse_json(body: bytes) -> Any:
  """The JSON value of a request body; ApiError 400 for bytes that are not UTF-8 JSON, for NaN
  and Infinity, a key twice in one object, a number of more than MAX_NUMBER characters, and
  nesting past Python's recursion limit."""
  try:
    text = body.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ApiError(400, f"the request body is not valid UTF-8 (byte {e.start})") from None
  try:
    return json.loads(text, object_pairs_hook=_object, parse_int=_int, parse_float=_float,
                      parse_constant=_constant)
  except json.JSONDecodeError as e:
    raise ApiError(400, f"the request body is not valid JSON: {e.msg} at line {e.lineno} "
                        f"column {e.colno}") from None
  except RecursionError:
    raise ApiError(400, "the request body's JSON nests too deeply") from None


def validate(model: type[pydantic.BaseModel], value: Any) -> Any:
  """`model` from parsed JSON; ApiError 422 naming the first wrong field."""
  try:
    return model.model_validate(value)
  except pydantic.ValidationError as e:
    first = e.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    raise ApiError(422, f"{where}: {first['msg']}") from None


def _bad_character(line: str) -> Optional[str]:
  for c in line:
    category = unicodedata.category(c)
    if (category == "Cc" and c != "\t") or category == "Cs":
      return f"U+{ord(c):04X}"
  return None


def check_lines(lines: Sequence[str], limits: Limits) -> None:
  """413 for too many or too long lines, 422 for control characters and lone surrogates."""
  if len(lines) > limits.max_lines:
    raise ApiError(413, f"{len(lines)} lines in one request; the limit is {limits.max_lines} "
                        "(max_lines): send them in several requests")
  for number, line in enumerate(lines, 1):
    if len(line) > limits.max_chars:
      raise ApiError(413, f"line {number} has {len(line)} characters; the limit is "
                          f"{limits.max_chars} (max_chars)")
    bad = _bad_character(line)
    if bad is not None:
      raise ApiError(422, f"line {number} holds the control character or lone surrogate {bad}: "
                          "send one sentence per line, without line breaks")


def check_beam(beam_size: Optional[int], limits: Limits) -> None:
  if beam_size is not None and beam_size > limits.max_beam:
    raise ApiError(422, f"beam_size={beam_size} is above the server's limit of "
                        f"{limits.max_beam} (max_beam)")
