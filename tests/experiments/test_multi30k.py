"""experiments/multi30k.py on a tiny stand-in corpus served from a folder
(file:// URLs: no network): fetch, train, translate the test set each way, score it."""

import gzip
import json

import scripts  # tests/ is on sys.path
from t2t_jax.corpora import demo
from t2t_jax.corpora import multi30k as multi30k_lib
from t2t_jax.inference import translator as translator_lib

multi30k = scripts.load("multi30k")

# A model that trains a few steps in seconds, evaluated on one dev batch (as
# tests/cli/test_train.py's; nothing here reads the dev figures).
TINY = ["--config.num_layers=1", "--config.d_model=32", "--config.d_ff=64",
        "--config.num_heads=2", "--config.vocab_size=200", "--config.tokens_per_batch=512",
        "--config.max_tokens_per_device=512", "--config.eval_every_steps=2",
        "--config.num_eval_batches=1", "--config.checkpoint_every_steps=2",
        "--config.max_decode_extra=4", "--config.average_last=2"]


def test_fetch_train_and_compare_modes(tmp_path, monkeypatch):
  pairs = demo.generate(400, seed=1, min_words=3, max_words=6)
  chunks = {"train": pairs[40:], "val": pairs[:20], "test_2016_flickr": pairs[20:40]}
  monkeypatch.setattr(multi30k_lib, "SPLITS", {
      split: (stem, len(chunks[stem])) for split, (stem, _) in multi30k_lib.SPLITS.items()})
  raw = tmp_path / "raw"
  raw.mkdir()
  for stem, chunk in chunks.items():
    for side, lang in enumerate(multi30k_lib.LANGUAGES):
      (raw / f"{stem}.{lang}.gz").write_bytes(
          gzip.compress("".join(p[side] + "\n" for p in chunk).encode()))
  made = []                                   # each mode's Translator keywords

  class Recording(translator_lib.Translator):
    def __init__(self, workdir, **settings):
      made.append(settings)
      super().__init__(workdir, **settings)

  monkeypatch.setattr(translator_lib, "Translator", Recording)
  workdir = tmp_path / "run"
  argv = [f"--workdir={workdir}", f"--data_dir={tmp_path / 'data'}",
          f"--base_url={raw.as_uri()}/", "--modes=float32,int8+shortlist", "--repeats=1",
          *TINY, "--config.num_train_steps=4"]
  out = multi30k.main(argv)
  assert out["train"]["steps"] == 4
  modes = json.loads((workdir / "modes.json").read_text())
  assert sorted(modes) == ["float32", "int8+shortlist"]
  assert modes["float32"]["lines"] == 20 and modes["float32"]["same_as_float32"] == 20
  assert modes["float32"]["bleu"]["sacrebleu"] is not None
  # The shortlist was built from the run's training pairs; int8 + shortlist scored apart.
  assert (workdir / "vocab" / "shortlist.npz").is_file()
  assert made == [{}, {"int8": True, "shortlist": True}]
  both = modes["int8+shortlist"]
  both_hyps = (workdir / "test.int8+shortlist.hyp").read_text().splitlines()
  hyps = (workdir / "test.float32.hyp").read_text().splitlines()
  assert both["lines"] == len(both_hyps) == len(hyps) == 20
  # The count of lines translated as float32 translates them, read back from the files.
  assert both["same_as_float32"] == sum(a == b for a, b in zip(both_hyps, hyps))
  # The recipe's test file is the fetched one, and t2t-train scored that same file.
  assert hyps == (workdir / "test.hyp").read_text().splitlines()

  # Run again, the run finished: it only re-scores, and results.json keeps what only the
  # training measured (not the re-score's time).
  trained = json.loads((workdir / "results.json").read_text())
  assert trained["train_tokens_per_s"] > 0 and trained["train_wall_time_s"] > 0
  again = multi30k.main([*argv[:3], "--modes=float32", "--repeats=1", *TINY,
                         "--config.num_train_steps=4"])
  assert again["train"]["steps"] == 4
  rescored = json.loads((workdir / "results.json").read_text())
  training = ("train_tokens_per_s", "train_wall_time_s")
  assert [rescored[k] for k in training] == [trained[k] for k in training]
  assert rescored["bleu"] == trained["bleu"]  # the same averaged params, decoded again
