"""`t2t-shortlist` builds a work directory's table; `t2t-translate --shortlist` decodes with it
(the flag reaches the search), and without a table says in one line how to build one."""

import pathlib
import shutil

import numpy as np
import pytest

from t2t_jax.cli import shortlist as shortlist_lib
from t2t_jax.cli import translate
from t2t_jax.corpora import demo
from t2t_jax.inference import shortlist
from t2t_jax.decoding import batch_decoder
from t2t_jax.ids import FILLER, PAD_ID
from t2t_jax.inference import translator


@pytest.fixture
def workdir(random_workdir, tmp_path):
  """A copy of the tiny random run (the table is written into it)."""
  copy = tmp_path / "run"
  shutil.copytree(random_workdir[0], copy)
  return copy


def _corpus(directory: pathlib.Path) -> str:
  pairs = demo.generate(200, seed=3, max_words=8)
  for side, name in enumerate(("train.en", "train.de")):
    (directory / name).write_text("".join(pair[side] + "\n" for pair in pairs))
  return f"{directory}/train.en,{directory}/train.de"


def test_translate_with_a_shortlist_picks_among_its_candidates(workdir, tmp_path, monkeypatch):
  source = tmp_path / "in.txt"
  source.write_text("the dog sleeps\nthe old man saw the small dog\n")
  with pytest.raises(SystemExit, match=r"^error: no shortlist at .*shortlist.npz: build one "
                     r"with t2t-shortlist --workdir \S+run ") as exit_info:
    translate.main(["--workdir", str(workdir), "--input", str(source), "--shortlist"])
  assert "\n" not in str(exit_info.value)

  shortlist_lib.main(["--workdir", str(workdir), "--train", _corpus(tmp_path),
                      "--per_source", "4", "--frequent", "5"])
  table = shortlist.workdir_table(workdir)
  assert table.per_source.shape[1] == 4 and len(table.frequent) == 5

  calls = []
  search = batch_decoder._beam_decode  # pylint: disable=protected-access

  def spy(params, inputs, max_lens, **settings):
    calls.append((np.asarray(inputs), np.asarray(settings["shortlist"])))
    out = search(params, inputs, max_lens, **settings)
    calls[-1] += (out[0],)
    return out

  monkeypatch.setattr(batch_decoder, "_beam_decode", spy)
  translate.main(["--workdir", str(workdir), "--input", str(source), "--output",
                  str(tmp_path / "out.txt"), "--shortlist"])
  assert calls
  for inputs, ids, tokens in calls:
    listed = table.candidates(inputs)
    np.testing.assert_array_equal(ids[:len(listed)], listed)
    assert np.all(ids[len(listed):] == FILLER)
    assert set(np.unique(tokens)) <= {PAD_ID, *listed}
  assert len((tmp_path / "out.txt").read_text().splitlines()) == 2


@pytest.mark.exact
def test_a_table_of_every_piece_translates_as_the_whole_vocabulary(workdir, tmp_path):
  # `t2t-shortlist --frequent <vocabulary size>`: every id, those the targets never use too.
  vocab_size = translator.load_tokenizer(workdir).vocab_size
  shortlist_lib.main(["--workdir", str(workdir), "--train", _corpus(tmp_path), "--per_source", "2",
                      "--frequent", str(vocab_size)])
  assert sorted(shortlist.workdir_table(workdir).frequent) == list(range(3, vocab_size))
  source = tmp_path / "in.txt"
  source.write_text("the dog sleeps\nthe old man saw the small dog\nyesterday a cat\n")
  outputs = []
  for flags in ([], ["--shortlist"]):
    out = tmp_path / f"out{len(flags)}.txt"
    translate.main(["--workdir", str(workdir), "--input", str(source), "--output", str(out),
                    "--nbest", "2", *flags])
    outputs.append(out.read_text())
  assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 6
