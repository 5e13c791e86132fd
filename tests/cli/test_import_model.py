"""t2t-import: a Marian model (tests/marian.py) imported, then every command on it.

t2t-translate greedy gives transformers' text; fine-tuning it with the paper's recipe
(`t2t-train --finetune_from`) on other text lowers its dev loss there and the result
translates and exports with Marian's ids; --int8, t2t-shortlist and the server's engine
(with its attention page) take it as they take a run trained here. A directory that is
not a Marian model is one line and exit status 1.
"""

import json
import shutil

import jax
import numpy as np
import pytest

import marian
from export import agreement
from t2t_jax.cli import import_model
from t2t_jax.cli import shortlist
from t2t_jax.cli import train
from t2t_jax.cli import translate
from t2t_jax.corpora import demo
from t2t_jax.export import huggingface
from t2t_jax.inference import translator as translator_lib
from t2t_jax.runtime import averaging
from t2t_jax.runtime import workdir as workdir_lib
from t2t_jax.serve import engines

N = 20


def _write(path, lines):
  path.write_text("".join(line + "\n" for line in lines))
  return path


def _dev_loss(workdir, params, pairs):
  """Mean negative log-likelihood per target token (no label smoothing) of our model."""
  cfg = workdir_lib.load_config(workdir)
  tokenizer = translator_lib.load_tokenizer(workdir)
  inputs = agreement.padded([tokenizer.encode(en) for en, _ in pairs])
  targets = agreement.padded([tokenizer.encode_target(de) for _, de in pairs])
  log_p = jax.nn.log_softmax(agreement.forward(cfg, params, inputs, targets), axis=-1)
  gold = np.take_along_axis(np.asarray(log_p), targets[..., None], axis=-1)[..., 0]
  return float(-gold[targets != 0].mean())


def test_import_then_translate_greedy_gives_transformers_text(extras, marian_dir, tmp_path,
                                                              capsys):
  workdir = tmp_path / "opus"
  import_model.main(["--from", "marian", "--model", str(marian_dir), "--workdir", str(workdir)])
  assert f"t2t-translate --workdir {workdir}" in capsys.readouterr().out
  sources = marian.held_out(N)
  out = tmp_path / "out.de"
  translate.main(["--workdir", str(workdir), "--beam_size", "1", "--no-programs",
                  "--input", str(_write(tmp_path / "in.en", sources)), "--output", str(out)])
  transformers, torch = extras["transformers"], extras["torch"]
  model = transformers.MarianMTModel.from_pretrained(marian_dir).eval()
  tokenizer = transformers.MarianTokenizer.from_pretrained(marian_dir)
  with torch.no_grad():
    tokens = model.generate(**tokenizer(sources, return_tensors="pt", padding=True),
                            num_beams=1, max_new_tokens=60,
                            bad_words_ids=[[model.config.pad_token_id]])
  expected = tokenizer.batch_decode(tokens, skip_special_tokens=True)
  ours = out.read_text().split("\n")[:-1]
  assert sum(a == b for a, b in zip(ours, expected)) >= N - 1


def test_what_is_not_a_marian_model_is_one_line_and_status_1(marian_dir, tmp_path):
  model_dir = tmp_path / "model"
  shutil.copytree(marian_dir, model_dir)
  (model_dir / "source.spm").unlink()
  with pytest.raises(SystemExit, match=r"^error: cannot import .*: it has no source.spm\. "
                                       r"t2t_jax imports a transformers MarianMTModel") as e:
    import_model.main(["--from", "marian", "--model", str(model_dir),
                       "--workdir", str(tmp_path / "run")])
  assert "\n" not in str(e.value) and not (tmp_path / "run").exists()
  with pytest.raises(SystemExit) as e:
    import_model.main(["--from", "fairseq", "--model", str(model_dir), "--workdir", "x"])
  assert e.value.code == 2


def _exported_logits_are_ours_in_marians_ids(extras, workdir, out, pairs):
  """The export `out` of `workdir` on Marian's ids gives `workdir`'s teacher-forced logits."""
  torch, transformers = extras["torch"], extras["transformers"]
  cfg = workdir_lib.load_config(workdir)
  tokenizer = translator_lib.load_tokenizer(workdir)
  order = huggingface.imported_ids(workdir).order
  inputs = agreement.padded([tokenizer.encode(en) for en, _ in pairs])
  targets = agreement.padded([tokenizer.encode_target(de) for _, de in pairs])
  logits = np.asarray(agreement.forward(cfg, averaging.load_params(workdir), inputs, targets))
  model = transformers.MarianMTModel.from_pretrained(out).eval()
  start = np.full((len(pairs), 1), model.config.decoder_start_token_id)
  with torch.no_grad():
    theirs = model(input_ids=torch.from_numpy(order[inputs]),
                   attention_mask=torch.from_numpy(inputs != 0).long(),
                   decoder_input_ids=torch.from_numpy(
                       np.concatenate([start, order[targets[:, :-1]]], axis=1))).logits.numpy()
  real = targets != 0
  return np.abs(theirs[..., order][real] - logits[real]).max()


def test_finetune_lowers_the_dev_loss_on_other_text_and_the_result_translates(
    extras, marian_dir, imported_workdir, tmp_path, capsys):
  # Other text: longer sentences (7-9 words) than the model was trained on (3-6).
  pairs = demo.generate(336, seed=5, min_words=7, max_words=9)
  dev, rest = pairs[:16], pairs[16:]
  files = {}
  for split, chunk in (("train", rest), ("dev", dev)):
    for side, lang in enumerate(("en", "de")):
      _write(tmp_path / f"{split}.{lang}", [pair[side] for pair in chunk])
    files[split] = f"{tmp_path}/{split}.en,{tmp_path}/{split}.de"
  tuned = tmp_path / "tuned"
  before = _dev_loss(imported_workdir, averaging.load_params(imported_workdir), dev)
  train.main([f"--finetune_from={imported_workdir}", f"--train={files['train']}",
              f"--dev={files['dev']}", f"--workdir={tuned}", "--config.num_train_steps=12",
              "--config.warmup_steps=4", "--config.learning_rate_scale=0.02",
              "--config.tokens_per_batch=1024", "--config.max_tokens_per_device=1024",
              "--config.eval_every_steps=12", "--config.log_every_steps=4",
              "--config.checkpoint_every_steps=6", "--config.average_last=1"])
  after = _dev_loss(tuned, averaging.load_params(tuned), dev)
  assert json.loads(capsys.readouterr().out.split("results written")[0])["steps"] == 12
  with capsys.disabled():
    print(f"dev loss on the other text: {before:.3f} before fine-tuning, {after:.3f} after")
  assert after < before - 0.05
  # The fine-tuned run keeps both tokenizers and Marian's ids, and translates.
  assert (tuned / "vocab" / "target.model").is_file()
  lines = [en for en, _ in dev[:4]]
  assert all(translator_lib.Translator(tuned).translate(lines, beam_size=1))
  # It exports with Marian's ids: the imported model's, its tokenizer's and its config's.
  original, kept = huggingface.imported_ids(imported_workdir), huggingface.imported_ids(tuned)
  assert np.array_equal(kept.order, original.order) and kept[1:] == original[1:]
  out = huggingface.export_huggingface(tuned, tmp_path / "hf")
  marian_tokenizer = extras["transformers"].MarianTokenizer
  ours = translator_lib.load_tokenizer(tuned)
  assert marian_tokenizer.from_pretrained(out)(lines)["input_ids"] == [
      list(original.order[ours.encode(line)]) for line in lines] == marian_tokenizer.from_pretrained(
          marian_dir)(lines)["input_ids"]
  config, theirs = (json.loads((d / "config.json").read_text()) for d in (out, marian_dir))
  for field in ("pad_token_id", "eos_token_id", "decoder_start_token_id", "vocab_size"):
    assert config[field] == theirs[field], field
  # and the exported weights are the tuned model's in those ids.
  assert _exported_logits_are_ours_in_marians_ids(extras, tuned, out, dev[:4]) < 1e-4


def test_int8_shortlist_and_the_servers_engine_take_the_imported_model(imported_workdir,
                                                                       tmp_path):
  workdir = tmp_path / "opus"
  shutil.copytree(imported_workdir, workdir)
  pairs = marian.sentences(400, seed=0)
  _write(tmp_path / "train.en", [en for en, _ in pairs])
  _write(tmp_path / "train.de", [de for _, de in pairs])
  shortlist.main(["--workdir", str(workdir), "--train", f"{tmp_path}/train.en,{tmp_path}/train.de"])
  sources = marian.held_out(8)
  greedy = translator_lib.Translator(workdir).translate(sources, beam_size=1)
  listed = translator_lib.Translator(workdir, shortlist=True).translate(sources, beam_size=1)
  assert sum(a == b for a, b in zip(listed, greedy)) >= 6, (listed, greedy)
  # t2t-serve's engine, int8: translations near float32's, and the attention of its page
  # over the target's own pieces.
  engine = engines.JaxEngine(translator_lib.Translator(workdir, int8=True), batch_size=8)
  served = [t.text for t in engine.translate(sources, engines.Settings(beam_size=1))]
  assert engine.translator.params["output_projection"].values.dtype == np.int8
  assert sum(a == b for a, b in zip(served, greedy)) >= 6, (served, greedy)
  page = engines.attention(engine.translator, sources[0], greedy[0], layer=-1, head=None)
  tokenizer = engine.translator.tokenizer
  assert page["target_pieces"][:-1] == tokenizer.target_sp.encode(greedy[0], out_type=str)
  assert np.allclose(np.asarray(page["weights"]).sum(axis=1), 1.0, atol=1e-3)
