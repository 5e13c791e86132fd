"""The one line reader: "\\n" ends a line, nothing else does; bad UTF-8 raises or is replaced."""

import io
import os
import queue
import threading

import pytest

from t2t_jax.data import textio


def test_splits_on_newline_only_and_drops_windows_carriage_returns(tmp_path):
  path = tmp_path / "a.txt"
  path.write_bytes("eins\u2028zwei\r\ndrei\x0bvier\n\nf\rünf\r\nsechs".encode())
  assert textio.read_lines(path) == ["eins\u2028zwei", "drei\x0bvier", "", "f\rünf", "sechs"]
  assert textio.read_lines(str(path)) == textio.read_lines(path)
  assert list(textio.iter_lines(path)) == textio.read_lines(path)


@pytest.mark.parametrize("raw, lines", [(b"", []), (b"\n", [""]), (b"\n\n", ["", ""]),
                                        (b"a", ["a"]), (b"a\n", ["a"]), (b"a\r\n", ["a"])])
def test_line_counts_match_wc(tmp_path, raw, lines):
  path = tmp_path / "a.txt"
  path.write_bytes(raw)
  assert textio.read_lines(path) == lines
  assert textio.read_lines(io.BytesIO(raw), errors="replace") == lines
  assert list(textio.iter_lines(path)) == lines
  assert list(textio.iter_lines(io.BytesIO(raw), errors="replace")) == lines
  assert textio.count_lines(path) == len(lines)


def test_strict_names_the_file_and_line(tmp_path):
  path = tmp_path / "bad.txt"
  path.write_bytes(b"eins\nzwei\ndr\xc3\nvier\n")
  with pytest.raises(ValueError, match=r"bad\.txt: line 3 is not valid UTF-8.*convert"):
    textio.read_lines(path)
  with pytest.raises(ValueError, match=r"cannot read .*missing\.txt"):
    textio.read_lines(tmp_path / "missing.txt")
  lines = textio.iter_lines(path)
  assert [next(lines), next(lines)] == ["eins", "zwei"]  # read as far as asked
  with pytest.raises(ValueError, match=r"bad\.txt: line 3 is not valid UTF-8.*convert"):
    next(lines)
  with pytest.raises(ValueError, match=r"cannot read .*missing\.txt"):
    next(textio.iter_lines(tmp_path / "missing.txt"))


def test_replace_keeps_every_line(tmp_path):
  raw = b"eins\n\xff zwei\ndrei\xc3\n"
  assert textio.read_lines(io.BytesIO(raw), errors="replace") == [
      "eins", "\ufffd zwei", "drei\ufffd"]
  assert list(textio.iter_lines(io.BytesIO(raw), errors="replace")) == [
      "eins", "\ufffd zwei", "drei\ufffd"]
  with pytest.raises(ValueError, match="errors='ignore'"):
    textio.read_lines(io.BytesIO(raw), errors="ignore")


def _next_group(groups, timeout=60.0):
  """The next group, or a failure (not a hang) if the reader waits for more than has arrived."""
  got = queue.Queue()
  threading.Thread(target=lambda: got.put(next(groups, None)), daemon=True).start()
  try:
    return got.get(timeout=timeout)
  except queue.Empty:
    pytest.fail(f"no group within {timeout} s: the reader waits for lines not yet written")


def test_a_pipe_gives_each_group_of_lines_as_it_arrives(tmp_path):
  read, write = os.pipe()
  with os.fdopen(read, "rb", buffering=0) as stream:
    assert textio.arrives(stream)
    groups = textio.iter_arrived(stream, errors="replace", most=3)
    os.write(write, b"eins\nzwei\r\n")
    assert _next_group(groups) == ["eins", "zwei"]      # without waiting for more
    os.write(write, b"drei\n")
    assert _next_group(groups) == ["drei"]
    os.write(write, b"a\nb\nc\nd\n\xff\nlast")
    os.close(write)
    assert _next_group(groups) == ["a", "b", "c"]       # at most `most`
    assert _next_group(groups) == ["d", "\ufffd", "last"]
    assert _next_group(groups) is None
  path = tmp_path / "a.txt"
  path.write_bytes(b"x\n")
  assert not textio.arrives(path) and not textio.arrives(io.BytesIO(b"x\n"))
  with open(path, "rb") as f:
    assert not textio.arrives(f)
