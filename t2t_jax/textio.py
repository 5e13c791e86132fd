"""The one line reader: UTF-8 text split on "\\n" only.

Only "\\n" ends a line, so a stray "\\r", "\\x0b" or U+2028 inside a sentence
stays in it and a file has as many lines as `wc -l` counts (plus a last line
without "\\n"); a "\\r" before the "\\n" (Windows files) is dropped.
Pure Python: no JAX, no vocabulary.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Union

Source = Union[str, os.PathLike, BinaryIO]


def read_lines(source: Source, errors: str = "strict") -> list[str]:
  """Lines of `source`: a path, or a binary stream such as `sys.stdin.buffer`.

  errors="strict" (data files, references) raises a ValueError naming the file
  and the line with invalid UTF-8; errors="replace" (text to translate) turns
  undecodable bytes into U+FFFD so that every input line still gets an output line.
  """
  if errors not in ("strict", "replace"):
    raise ValueError(f"errors={errors!r}: use 'strict' or 'replace'")
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
