"""t2t-translate on a tiny random model in a temporary work directory (its library,
inference/translator.py: tests/inference/test_translator.py).

N-best lists, alignments, samples and ensembles from the command line; clear errors
for a work directory without a model and for ensembles without one vocabulary.
"""

import io
import logging
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import formats
from t2t_jax.cli import translate
from t2t_jax.corpora import demo
from t2t_jax.data import textio
from t2t_jax.data import vocab
from t2t_jax.decoding import batch_decoder
from t2t_jax.inference import long_inputs
from t2t_jax.decoding import sentence_batches
from t2t_jax.evaluation import text as text_lib
from t2t_jax.inference import translator as translator_lib

import trained  # tests/trained.py (tests/ is on sys.path)
from random_run import LINES, LONG

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def translator(random_workdir):
  return translator_lib.Translator(random_workdir[0])


@pytest.fixture(scope="module")
def workdir(random_workdir):
  return random_workdir[0]


def test_command_line_stdin_to_stdout_and_files(workdir, translator, monkeypatch, capsysbinary,
                                                caplog, tmp_path):
  expected = translator.translate(LINES, warn=lambda _: None)
  data = ("\r\n".join(LINES) + "\n").encode("utf-8") + b"\xff broken utf-8\n"
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
  with caplog.at_level(logging.WARNING, logger="t2t_jax.inference.streaming"):
    translate.main(["--workdir", str(workdir)])
  captured = capsysbinary.readouterr()
  out = captured.out.decode("utf-8").split("\n")
  assert out[-1] == "" and len(out) - 1 == len(LINES) + 1
  assert out[:-2] == expected
  assert "line 7 " in caplog.text

  # The flags reach the search.
  calls = []
  search = batch_decoder._beam_decode  # pylint: disable=protected-access

  def spy(params, inputs, max_lens, **settings):
    calls.append((inputs.shape, settings))
    return search(params, inputs, max_lens, **settings)

  monkeypatch.setattr(batch_decoder, "_beam_decode", spy)
  source, target = tmp_path / "in.txt", tmp_path / "out.txt"
  # Short lines: both batches have the same shape, so one program is compiled.
  source.write_text("the dog sleeps\n\na\nthe dog\n", encoding="utf-8")
  translate.main(["--workdir", str(workdir), "--input", str(source), "--output", str(target),
                  "--beam_size", "3", "--alpha", "0.2", "--max_decode_extra", "1",
                  "--batch_size", "2", "--no-average"])
  assert len(textio.read_lines(target)) == 4
  assert len(calls) == 2  # three non-empty lines, two per batch
  for shape, settings in calls:
    assert shape[0] <= 2
    assert (settings["beam_size"], settings["alpha"]) == (3, 0.2)
    assert settings["max_len"] == shape[1] + 1


def test_missing_workdir_or_model_says_to_train_first(workdir, tmp_path):
  with pytest.raises(SystemExit, match="train a model there first"):
    translate.main(["--workdir", str(tmp_path / "nowhere")])
  empty = tmp_path / "untrained"
  empty.mkdir()
  (empty / "config.json").write_text((workdir / "config.json").read_text())
  with pytest.raises(SystemExit, match="spm.model not found: train"):
    translate.main(["--workdir", str(empty)])
  (empty / "vocab").mkdir()
  (empty / "vocab" / "spm.model").write_bytes((workdir / "vocab" / "spm.model").read_bytes())
  with pytest.raises(SystemExit, match="no checkpoints"):
    translate.main(["--workdir", str(empty)])
  with pytest.raises(SystemExit, match="alpha=-1.0"):
    translate.main(["--workdir", str(workdir), "--alpha", "-1"])


SHORT = ["the dog sleeps", "", "a house", "the old man saw the small dog", "the cat"]


def _run(workdir, tmp_path, *flags, lines=SHORT):
  source, target = tmp_path / "in.txt", tmp_path / "out.txt"
  source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
  translate.main(["--workdir", str(workdir), "--input", str(source), "--output", str(target),
                  *flags])
  return textio.read_lines(target)


def test_nbest_lists_with_alignments(workdir, translator, tmp_path):
  rows = _run(workdir, tmp_path, "--nbest", "2", "--alignments")
  parsed = [formats.parse_nbest(row) for row in rows]
  assert [p[0] for p in parsed] == [0, 0, 1, 2, 2, 3, 3, 4, 4]  # one empty hypothesis for ""
  assert parsed[2] == (1, "", 0.0, [])
  best = [p[1] for i, p in enumerate(parsed) if i == 0 or parsed[i - 1][0] != p[0]]
  assert best == translator.translate(SHORT)
  for index, text, _, pairs in parsed:
    assert all(0 <= i < len(SHORT[index].split()) and 0 <= j < len(text.split())
               for i, j in pairs)
    assert {j for _, j in pairs} == set(range(len(text.split())))
  for first, second in zip(parsed[::1], parsed[1:]):
    if first[0] == second[0]:
      assert first[2] >= second[2]  # best first
  one_best = _run(workdir, tmp_path, "--alignments", "--alignment_layer", "0",
                  "--alignment_head", "1")
  assert [row.split("\t")[0] for row in one_best] == translator.translate(SHORT)
  with pytest.raises(SystemExit, match="n_best=3 must be <= beam_size=2"):
    _run(workdir, tmp_path, "--nbest", "3")
  with pytest.raises(SystemExit, match="layer=1 does not exist"):
    _run(workdir, tmp_path, "--alignments", "--alignment_layer", "1")


def test_samples_are_seeded(workdir, tmp_path):
  flags = ("--sample", "--temperature", "2", "--top_k", "20", "--nbest", "3")
  first = _run(workdir, tmp_path, *flags, "--seed", "3")
  again = _run(workdir, tmp_path, *flags, "--seed", "3", "--batch_size", "1", "--window", "2")
  alone = _run(workdir, tmp_path, *flags, "--seed", "3", "--batch_size", "1", "--in_flight", "1")
  other = _run(workdir, tmp_path, *flags, "--seed", "4")
  # Neither the batching nor batches decoded at once change a line's samples.
  assert first == again == alone
  assert first != other
  assert len(first) == 3 * 4 + 1 and len({r.split("\t")[1] for r in first}) > 4


def test_ensembles_of_work_directories_and_checkpoints(random_workdir, translator, tmp_path):
  workdir, first, _ = random_workdir
  pair = translator_lib.Translator(workdir, ensemble=[workdir])
  assert len(pair.members) == 2
  assert pair.translate(SHORT) == translator.translate(SHORT)
  mixed = translator_lib.Translator(workdir / "checkpoints" / "1",
                                    ensemble=[workdir / "averaged" / "2"])
  for got, expected in zip(jax.tree.leaves(mixed.params), jax.tree.leaves(first)):
    np.testing.assert_array_equal(got, expected)
  rows = _run(workdir, tmp_path, "--ensemble", str(workdir / "checkpoints" / "1"),
              str(workdir / "checkpoints" / "2"))
  assert len(rows) == len(SHORT) and rows[1] == ""

  other = tmp_path / "other"
  shutil.copytree(workdir, other)
  (other / "vocab" / "spm.model").unlink()
  pairs = demo.generate(200, seed=5, max_words=8)
  vocab.train(pairs, str(other / "vocab" / "spm"), 80)
  with pytest.raises(SystemExit, match=r"other was trained with another vocabulary.*share "
                                       "their vocabularies"):
    _run(workdir, tmp_path, "--ensemble", str(other))
  with pytest.raises(SystemExit, match="not a finished checkpoint"):
    _run(workdir, tmp_path, "--ensemble", str(workdir / "checkpoints" / "7"))


def test_a_file_streams_with_a_progress_bar(workdir, tmp_path, capsys):
  expected = dict(zip(SHORT, _run(workdir, tmp_path)))
  lines = [SHORT[i % len(SHORT)] for i in range(300)]
  rows = _run(workdir, tmp_path, "--window", "16", "--progress", lines=lines)
  assert rows == [expected[line] for line in lines]
  assert "300/300" in capsys.readouterr().err


def _read_line(stream, timeout: float):
  got = queue.Queue()
  threading.Thread(target=lambda: got.put(stream.readline()), daemon=True).start()
  try:
    return got.get(timeout=timeout)
  except queue.Empty:
    return None


def test_a_pipe_is_answered_line_by_line(trained_workdir, tmp_path):
  """The first translation comes back before the second line is written (as a program
  that waits for each answer writes); the timeout only keeps a regression from hanging.
  As a user starts it (no JAX_PLATFORMS): on a host without accelerators, where the
  accelerators extra is installed, no plugin's traceback (cuInit) is logged."""
  first, second = trained.held_out_sources(2)
  expected = translator_lib.Translator(trained_workdir).translate([first, second])
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  with open(tmp_path / "stderr", "wb") as stderr:
    proc = subprocess.Popen(
        [sys.executable, "-m", "t2t_jax.cli.translate", "--workdir", str(trained_workdir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=ROOT, env=env)
  try:
    proc.stdin.write(first.encode() + b"\n")
    proc.stdin.flush()
    answer = _read_line(proc.stdout, timeout=300)
    assert answer is not None, "no translation before the second line: " + (
        tmp_path / "stderr").read_text()[-2000:]
    proc.stdin.write(second.encode() + b"\n")
    proc.stdin.close()
    rest = proc.stdout.read()
    assert proc.wait(timeout=300) == 0
  finally:
    proc.kill()
  assert (answer + rest).decode().splitlines() == expected
  assert "Traceback" not in (tmp_path / "stderr").read_text()


def test_long_lines_are_split_cropped_or_refused(workdir, translator, tmp_path):
  tokenizer, limit = translator.tokenizer, translator.cfg.max_len - 1
  assert text_lib.source_pieces(tokenizer, LONG) > limit
  spans = long_inputs.split_spans(LONG, lambda t: text_lib.source_pieces(tokenizer, t) <= limit)
  parts = [LONG[a:b] for a, b in spans]
  assert len(parts) > 1 and " ".join(parts) == LONG
  split = _run(workdir, tmp_path, lines=["the dog", LONG])
  assert split[1] == " ".join(t for t in translator.translate(parts) if t)
  crop = _run(workdir, tmp_path, "--long-inputs", "crop", lines=["the dog", LONG])
  assert crop[1] == translator.translate([LONG], long_inputs="crop", warn=lambda _: None)[0]
  assert crop[0] == split[0]
  with pytest.raises(SystemExit, match=f"error: line 2 has .* more than the model's {limit}"):
    _run(workdir, tmp_path, "--long_inputs", "fail", lines=["the dog", LONG])


def test_help_shows_the_work_directory_values_in_groups(workdir, capsys):
  with pytest.raises(SystemExit) as exit_:
    translate.main(["--workdir", str(workdir), "--help"])
  assert exit_.value.code == 0
  text = " ".join(capsys.readouterr().out.split())
  assert "--beam_size K default: this work directory's: 2" in text
  assert "default: this work directory's: 4" in text          # max_decode_extra
  for group in ("models:", "input and output:", "search:", "n-best lists and alignments:",
                "sampling (back-translation):", "speed:"):
    assert f" {group} " in text
  with pytest.raises(SystemExit):
    translate.main(["--help"])
  text = " ".join(capsys.readouterr().out.split())
  assert "--beam_size K default: the config's beam_size" in text


def test_flags_as_users_spell_them(workdir, capsys):
  dashed = translate.parse_args(["--workdir", str(workdir), "--beam-size", "3", "--n-best", "2",
                                 "--max-len-a", "0.5", "--max-len-b=7", "--no_average",
                                 "--long-inputs", "fail"])
  plain = translate.parse_args(["--workdir", str(workdir), "--beam_size", "3", "--nbest", "2",
                                "--max_len_a", "0.5", "--max_decode_extra", "7", "--no-average",
                                "--long_inputs", "fail"])
  assert dashed == plain
  assert (plain.beam_size, plain.nbest, plain.max_len_a, plain.max_decode_extra) == (3, 2, 0.5, 7)
  with pytest.raises(SystemExit) as exit_:
    translate.main(["--workdir", str(workdir), "--beam", "2"])
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert "--beam 2 (did you mean --beam_size?)" in err and len(err.splitlines()) == 1


def test_device_dtype_and_output_limits_reach_the_search(workdir, tmp_path, monkeypatch):
  calls = []
  search = batch_decoder._beam_decode  # pylint: disable=protected-access

  def spy(params, inputs, max_lens, **settings):
    calls.append((np.asarray(inputs), np.asarray(max_lens), settings, params))
    return search(params, inputs, max_lens, **settings)

  monkeypatch.setattr(batch_decoder, "_beam_decode", spy)
  try:
    rows = _run(workdir, tmp_path, "--device", "cpu", "--dtype", "bfloat16", "--max_len_a", "0.5",
                "--max_len_b", "1", "--in_flight", "1")
    assert jax.config.jax_default_device.platform == "cpu"
  finally:
    jax.config.update("jax_default_device", None)
  assert len(rows) == len(SHORT) and calls
  for inputs, max_lens, settings, params in calls:
    # bfloat16 weights cast once at load, the rest float32 (quantization="bfloat16").
    assert all(m.quantization == "bfloat16" and m.dtype == "float32" for m in settings["models"])
    assert all(p["embedding"]["embedding"].dtype == jnp.bfloat16 for p in params)
    lengths = (inputs != 0).sum(1)
    np.testing.assert_array_equal(max_lens, np.where(lengths > 0, np.ceil(lengths / 2) + 1, 1))
    assert settings["max_len"] == np.ceil(inputs.shape[1] / 2) + 1
  with pytest.raises(SystemExit, match="error: no TPU found .JAX sees: cpu."):
    _run(workdir, tmp_path, "--device", "tpu")


def test_int8_reaches_the_model_and_refuses_bfloat16(workdir, tmp_path, monkeypatch):
  calls = []
  search = batch_decoder._beam_decode  # pylint: disable=protected-access

  def spy(params, inputs, max_lens, **settings):
    calls.append((params, settings))
    return search(params, inputs, max_lens, **settings)

  monkeypatch.setattr(batch_decoder, "_beam_decode", spy)
  rows = _run(workdir, tmp_path, "--int8", "--no-programs")
  assert len(rows) == len(SHORT) and calls
  for params, settings in calls:
    assert all(m.quantization == "int8" for m in settings["models"])
    assert all(p["output_projection"].values.dtype == np.int8 for p in params)
  with pytest.raises(SystemExit, match="cannot be combined with dtype='bfloat16'"):
    _run(workdir, tmp_path, "--int8", "--dtype", "bfloat16")


def test_stored_programs_are_loaded_not_compiled_and_translate_the_same(random_workdir, tmp_path,
                                                                        monkeypatch, caplog):
  # Without the programs the other commands here stored in it.
  wd = shutil.copytree(random_workdir[0], tmp_path / "run", ignore=shutil.ignore_patterns("programs"))
  lines = ["the dog sleeps", "a"]
  reference = translator_lib.Translator(wd)
  expected = reference.translate(lines)
  sources = [reference.tokenizer.encode(line)[:-1] for line in lines]
  rows, width = sentence_batches.source_rows(sources, reference.cfg.decode_batch_size,
                                             reference.cfg.max_len).shape
  store_programs = translator_lib.Translator.store_programs  # that shape's alone, to be quick
  monkeypatch.setattr(translator_lib.Translator, "store_programs",
                      lambda self: store_programs(self, rows=[rows], widths=[width]))
  caplog.set_level(logging.INFO)
  translate.main(["--workdir", str(wd), "--store-programs"])
  assert any("1 decoding programs" in r.getMessage() for r in caplog.records)
  assert len(list((wd / "programs").rglob("*.bin"))) == 1
  jax.clear_caches()
  fresh = translator_lib.Translator(wd, programs=True)     # as t2t-translate in a new process
  assert fresh.translate(lines) == expected
  assert (fresh.programs.compiled, fresh.programs.loaded) == (0, 1)
  out = tmp_path / "out.txt"
  (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
  translate.main(["--workdir", str(wd), "--input", str(tmp_path / "in.txt"), "--output", str(out),
                  "--no-programs"])
  assert out.read_text().splitlines() == expected
