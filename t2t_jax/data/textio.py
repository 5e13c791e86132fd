"""The one line reader: UTF-8 text split on "\\n" only.

Only "\\n" ends a line, so a stray "\\r", "\\x0b" or U+2028 inside a sentence
stays in it and a file has as many lines as `wc -l` counts (plus a last line
without "\\n"); a "\\r" before the "\\n" (Windows files) is dropped.
`read_lines` reads a whole file; `iter_lines` the same lines one at a time,
for input of any length (t2t-translate streams a file with it);
`iter_arrived` the same lines in the groups that have arrived together, for
input that arrives over time (a terminal or a pipe, `arrives`), so that a line
can be answered before the next one is written. Pure Python: no JAX, no vocabulary.
"""

from __future__ import annotations

import io
import os
import select
import stat
from typing import BinaryIO, Iterator, Optional, Union

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
    yield _decode_line(raw, name, number, errors)


def _decode_line(raw: bytes, name: str, number: int, errors: str) -> str:
  if raw.endswith(b"\n"):
    raw = raw[:-1]
  if raw.endswith(b"\r"):
    raw = raw[:-1]
  try:
    return raw.decode("utf-8", errors=errors)
  except UnicodeDecodeError as e:
    raise ValueError(f"{name}: line {number} is not valid UTF-8 ({e.reason} at byte "
                     f"{e.start} of the line); convert the file to UTF-8") from None


def _fileno(source: Source) -> Optional[int]:
  try:
    return source.fileno()  # type: ignore[union-attr]
  except (AttributeError, OSError, io.UnsupportedOperation):  # BytesIO, wrapped test streams
    return None


def arrives(source: Source) -> bool:
  """Whether lines of `source` arrive over time (a terminal, a pipe, a FIFO, a socket)
  rather than being stored (a regular file, or an in-memory stream)."""
  if isinstance(source, (str, os.PathLike)):
    try:
      return not stat.S_ISREG(os.stat(source).st_mode)
    except OSError:
      return False  # reading it will say what is wrong
  fd = _fileno(source)
  return fd is not None and not stat.S_ISREG(os.fstat(fd).st_mode)


def iter_arrived(source: Source, errors: str = "strict",
                 most: Optional[int] = None) -> Iterator[list[str]]:
  """The lines `iter_lines` gives, in groups of the lines that have arrived together.

  Waits for the first line of a group, then adds the lines already readable
  without waiting (at most `most` lines a group); so a line typed on a
  terminal, or written into a pipe by a program waiting for its answer, makes a
  group of its own, while a fast producer's lines come in large groups. Reads
  the file descriptor itself: `source` is a path (a FIFO) or a stream with one
  (`sys.stdin.buffer`) of which nothing has been read yet.
  """
  _check_errors(errors)
  if most is not None and most < 1:
    raise ValueError(f"most={most} must be >= 1")
  if isinstance(source, (str, os.PathLike)):
    name = os.fspath(source)
    try:
      stream = open(source, "rb", buffering=0)
    except OSError as e:
      raise ValueError(f"cannot read {name}: {e.strerror}") from None
    with stream:
      yield from _arrived(stream.fileno(), name, errors, most)
  else:
    fd = _fileno(source)
    if fd is None:
      raise ValueError(f"{source!r} has no file descriptor: read it with iter_lines")
    yield from _arrived(fd, getattr(source, "name", "<stream>"), errors, most)


def _arrived(fd: int, name: str, errors: str, most: Optional[int]) -> Iterator[list[str]]:
  ready: list[bytes] = []      # complete lines read, not yet given out
  partial, ended, number = b"", False, 0

  def read() -> None:          # one read: blocks until something has arrived
    nonlocal partial, ended
    block = os.read(fd, 1 << 16)
    if not block:
      ended = True
      if partial:              # a last line without "\n"
        ready.append(partial)
        partial = b""
      return
    *lines, partial = (partial + block).split(b"\n")
    ready.extend(lines)

  while True:
    while not ready and not ended:
      read()
    if not ready:
      return
    while (not ended and (most is None or len(ready) < most)
           and select.select([fd], [], [], 0)[0]):   # readable now, without waiting
      read()
    group = ready[:most]
    del ready[:len(group)]
    yield [_decode_line(raw, name, number + k, errors) for k, raw in enumerate(group, 1)]
    number += len(group)


def count_lines(path: str | os.PathLike) -> int:
  """How many lines `read_lines(path)` gives, counted without decoding (for progress bars)."""
  count, last = 0, b"\n"
  with open(path, "rb") as f:
    while block := f.read(1 << 20):
      count += block.count(b"\n")
      last = block[-1:]
  return count + (last != b"\n")
