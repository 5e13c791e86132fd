"""The one line reader: UTF-8 text split on "\\n" only.

Only "\\n" ends a line, so a stray "\\r", "\\x0b" or U+2028 inside a sentence
stays in it and a file has as many lines as `wc -l` counts (plus a last line
without "\\n"); a "\\r" before the "\\n" (Windows files) is dropped.
`read_lines` reads a whole file; `iter_lines` the same lines one at a time,
for input of any length (t2t-translate streams with it). Pure Python: no JAX,
no vocabulary.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Iterator, Union

Source = Union[str, os.PathLike, BinaryIO]


def _check_errors(errors: str) -> None:
  if errors not in ("strict", "replace"):
    raise ValueError(f"errors={errors!r}: use 'strict' or 'replace'")


def read_lines(source: Source, errors: str = "strict") -> list[str]:
  """Lines of `source`: a path, or a binary stream such as `sys.stdin.buffer`.

  errors="strict" (data files, references) raises a ValueError naming the file
  and the line with invalid UTF-8; errors="replace" (text to translate) turns
  undecodable bytes into U+FFFD so that every input line still gets an output line.
  """
  _check_errors(errors)
  if isinstance(source, (str, os.PathLike)):
    name = os.fspath(source)
    try:
      with open(source, "rb") as f:
        raw = f.read()
    except OSError as e:
      raise ValueError(f"cannot read {name}: {e.strerror}") from None
  else:
    name = getattr(source, "name", "<stream>")
    raw = source.read()
  try:
    text = raw.decode("utf-8", errors=errors)
  except UnicodeDecodeError as e:
    line = raw.count(b"\n", 0, e.start) + 1
    raise ValueError(f"{name}: line {line} is not valid UTF-8 ({e.reason} at byte "
                     f"{e.start}); convert the file to UTF-8") from None
  lines = text.split("\n")
  if lines[-1] == "":  # the "\n" that ends the last line starts no new one
    lines.pop()
  return [line[:-1] if line.endswith("\r") else line for line in lines]


def iter_lines(source: Source, errors: str = "strict") -> Iterator[str]:
  """The lines `read_lines` gives, one at a time: memory for one line, not the file.

  A path is opened when iteration starts and closed when it ends; a stream is
  read as far as the iteration goes.
  """
  _check_errors(errors)
  if isinstance(source, (str, os.PathLike)):
    name = os.fspath(source)
    try:
      stream = open(source, "rb")
    except OSError as e:
      raise ValueError(f"cannot read {name}: {e.strerror}") from None
    with stream:
      yield from _decoded(stream, name, errors)
  else:
    yield from _decoded(source, getattr(source, "name", "<stream>"), errors)


def _decoded(stream: BinaryIO, name: str, errors: str) -> Iterator[str]:
  for number, raw in enumerate(stream, 1):  # binary streams split on b"\n" only
    if raw.endswith(b"\n"):
      raw = raw[:-1]
    if raw.endswith(b"\r"):
      raw = raw[:-1]
    try:
      yield raw.decode("utf-8", errors=errors)
    except UnicodeDecodeError as e:
      raise ValueError(f"{name}: line {number} is not valid UTF-8 ({e.reason} at byte "
                       f"{e.start} of the line); convert the file to UTF-8") from None


def count_lines(path: str | os.PathLike) -> int:
  """How many lines `read_lines(path)` gives, counted without decoding (for progress bars)."""
  count, last = 0, b"\n"
  with open(path, "rb") as f:
    while block := f.read(1 << 20):
      count += block.count(b"\n")
      last = block[-1:]
  return count + (last != b"\n")
