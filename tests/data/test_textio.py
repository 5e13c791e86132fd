"""The one line reader: "\\n" ends a line, nothing else does; bad UTF-8 raises or is replaced."""

import io

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
