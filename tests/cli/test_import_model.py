"""t2t-import: a Marian model (tests/marian.py) imported, then every command on it.

t2t-translate greedy gives transformers' text, for the first model and each configuration
of tests/marian.py's VARIANTS (every difference a tie); fine-tuning it with the paper's
recipe (`t2t-train --finetune_from`) on other text lowers its dev loss there and the result
translates and exports with Marian's ids; --int8, t2t-shortlist and the server's engine
(with its attention page) take it as they take a run trained here, and every command the
separate-vocabulary model; a multilingual model reads its language tokens and names them
when a source lacks one. A directory that is not a Marian model is one line and exit
status 1, and so is each command an imported directory cannot serve, naming what does.
"""

import json
import shutil

import jax
import numpy as np
import pytest

import marian
from export import agreement
from t2t_jax.cli import average
from t2t_jax.cli import export
from t2t_jax.cli import import_model
from t2t_jax.cli import score
from t2t_jax.cli import shortlist
from t2t_jax.cli import train
from t2t_jax.cli import translate
from t2t_jax.corpora import demo
from t2t_jax.data import tokenized
from t2t_jax.decoding import sentence_batches
from t2t_jax.evaluation import text as text_lib
from t2t_jax.export import exported_search
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


@pytest.mark.exact
@pytest.mark.parametrize("variant", list(marian.VARIANTS))
def test_each_configuration_imports_and_translates_greedy_as_transformers_generates(
    extras, marian_variant, variant, tmp_path, capsys):
  """t2t-import, then `t2t-translate --beam_size 1 --min_len 0` on held-out sources: transformers'
  greedy text, each sentence within our output limit; a sentence that differs is a tie, which
  float noise decides (our model's log-probabilities of both choices within 1e-4)."""
  torch, transformers = extras["torch"], extras["transformers"]
  torch.set_num_threads(1)   # the tests run two processes on two cores
  model_dir, workdir = marian_variant(variant), tmp_path / "opus"
  import_model.main(["--from", "marian", "--model", str(model_dir), "--workdir", str(workdir)])
  printed = capsys.readouterr().out
  assert ("Its 2 target language tokens, one of which starts each source: >>deu<< >>nld<<"
          in printed) == (variant == "multilingual")
  sources = [source for source, _ in marian.held_out_pairs(variant, N)]
  out = tmp_path / "out.txt"
  translate.main(["--workdir", str(workdir), "--beam_size", "1", "--min_len", "0",
                  "--no-programs", "--input", str(_write(tmp_path / "in.txt", sources)),
                  "--output", str(out)])
  texts = out.read_text().split("\n")[:-1]
  # The same search from Python, ids out (the command's programs: its batch shape), and
  # transformers' on Marian's ids.
  cfg = workdir_lib.load_config(workdir)
  params = averaging.load_params(workdir)
  ours_tokenizer = translator_lib.load_tokenizer(workdir)
  ids = [ours_tokenizer.encode(s) for s in sources]
  ours = sentence_batches.decode_ids(cfg, params, [i[:-1] for i in ids], beam_size=1, min_len=0)
  assert [text_lib.ids_to_text(ours_tokenizer, o) for o in ours] == texts
  order = huggingface.imported_ids(workdir)
  model = transformers.MarianMTModel.from_pretrained(model_dir).eval()
  tokenizer = transformers.MarianTokenizer.from_pretrained(model_dir)
  found = agreement.marian_generate(torch, model, [list(order.order[i]) for i in ids],
                                    exported_search.output_limits(cfg, ids),
                                    tokenizer.convert_tokens_to_ids("<pad>"))
  theirs = [tokenizer.decode(row) for row in found]
  assert all(texts) and sum(len(o) < limit - 1 for o, limit in zip(
      ours, exported_search.output_limits(cfg, ids))) >= N // 2      # it ends its sentences
  back = np.argsort(order.target_side.order)                          # Marian id -> ours
  # (MarianTokenizer strips a text's ends: a sentence cut at its limit may end with a space.)
  differ = [k for k in range(N) if texts[k].strip() != theirs[k]]
  gaps = [agreement.divergence_gap(cfg, params, ids[k], ours[k], list(back[found[k]]))
          for k in differ]
  print(f"{variant}: greedy {N - len(differ)}/{N} translations transformers' text, the rest "
        f"ties within {max(map(abs, gaps), default=0):.1e}")
  assert len(differ) <= 1 and all(abs(gap) < agreement.TIE for gap in gaps)


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
  # The dev loss compared is _dev_loss's; the run's own evaluation reads one dev batch, so
  # it traces one program, not one per length bucket.
  train.main([f"--finetune_from={imported_workdir}", f"--train={files['train']}",
              f"--dev={files['dev']}", f"--workdir={tuned}", "--config.num_train_steps=12",
              "--config.warmup_steps=4", "--config.learning_rate_scale=0.02",
              "--config.tokens_per_batch=1024", "--config.max_tokens_per_device=1024",
              "--config.eval_every_steps=12", "--config.num_eval_batches=1",
              "--config.log_every_steps=4", "--config.checkpoint_every_steps=6",
              "--config.average_last=1"])
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


def test_every_command_takes_separate_vocabularies(extras, imported_variant, imported_workdir,
                                                   tmp_path, capsys):
  """The separate-vocabulary model through t2t-translate (--nbest, --int8, --dtype, --shortlist),
  the server's JAX engine, `t2t-train --finetune_from` and t2t-export; an ensemble with a
  model of other vocabularies is refused in one line. (t2t-score: tests/cli/test_score.py.)"""
  variant = "separate_vocabularies"
  workdir = tmp_path / "opus"
  shutil.copytree(imported_variant(variant), workdir)
  sources = [source for source, _ in marian.held_out_pairs(variant, 8)]
  greedy = translator_lib.Translator(workdir).translate(sources, beam_size=1)
  run = lambda *flags: _run_translate(workdir, tmp_path, sources, *flags)
  nbest = run("--nbest", "2", "--beam_size", "2")
  assert [row.split("\t")[0] for row in nbest] == [str(k) for k in range(8) for _ in range(2)]
  close = lambda rows: sum(a == b for a, b in zip(rows, greedy)) >= 6
  assert close(run("--beam_size", "1", "--int8")) and close(run("--beam_size", "1", "--dtype",
                                                                "bfloat16"))
  pairs = marian.pairs(variant, 400, seed=0)
  train_files = f"{_write(tmp_path / 'train.en', [en for en, _ in pairs])},"
  train_files += str(_write(tmp_path / "train.de", [de for _, de in pairs]))
  shortlist.main(["--workdir", str(workdir), "--train", train_files])
  assert close(run("--beam_size", "1", "--shortlist"))
  engine = engines.JaxEngine(translator_lib.Translator(workdir), batch_size=8)
  assert close([t.text for t in engine.translate(sources, engines.Settings(beam_size=1))])
  with pytest.raises(SystemExit, match=r"^error: .* was trained with another vocabulary than "
                                       r".*: the models of an ensemble must share their "
                                       r"vocabularies$"):
    run("--ensemble", str(imported_workdir))
  # Fine-tuned on its own text, it keeps both vocabularies and exports them back.
  dev = f"{_write(tmp_path / 'dev.en', sources)},{_write(tmp_path / 'dev.de', greedy)}"
  tuned = tmp_path / "tuned"
  # (One dev batch evaluated: one program traced, not one per length bucket.)
  train.main([f"--finetune_from={workdir}", f"--train={train_files}", f"--dev={dev}",
              f"--workdir={tuned}", "--config.num_train_steps=2", "--config.warmup_steps=2",
              "--config.learning_rate_scale=0.02", "--config.tokens_per_batch=512",
              "--config.max_tokens_per_device=512", "--config.eval_every_steps=2",
              "--config.num_eval_batches=1", "--config.checkpoint_every_steps=2",
              "--config.average_last=1"])
  capsys.readouterr()
  assert all(translator_lib.Translator(tuned).translate(sources[:2], beam_size=1))
  out = huggingface.export_huggingface(tuned, tmp_path / "hf")
  assert (out / huggingface.TARGET_VOCABULARY).read_bytes() == (
      workdir / "vocab" / "imported" / huggingface.TARGET_VOCABULARY).read_bytes()


def _run_translate(workdir, tmp_path, lines, *flags):
  out = tmp_path / "out.txt"
  translate.main(["--workdir", str(workdir), "--no-programs", "--input",
                  str(_write(tmp_path / "in.txt", lines)), "--output", str(out), *flags])
  return out.read_text().split("\n")[:-1]


def test_a_multilingual_model_reads_its_language_tokens_and_names_them_when_missing(
    imported_variant, tmp_path):
  workdir = imported_variant("multilingual")
  tokenizer = translator_lib.load_tokenizer(workdir)
  (source, _), (other, _) = marian.held_out_pairs("multilingual", 2)
  assert source.startswith(">>deu<< ") and other.startswith(">>nld<< ")
  # Fine-tuning data reads the token as one id, as the commands do.
  split, _ = tokenized.tokenize_pairs(tokenizer, [(source, "der Hund")])
  assert split.src_ids[0] == tokenizer.sp.piece_to_id(">>deu<<") == tokenizer.encode(source)[0]
  bare = source[len(">>deu<< "):]
  message = (r"this model needs a target language token at the start of each source "
             r"\(>>deu<<, >>nld<<\): it has none; write e.g. '>>deu<< ")
  with pytest.raises(SystemExit, match="^error: " + message) as e:
    _run_translate(workdir, tmp_path, [source, bare])
  assert "\n" not in str(e.value)
  with pytest.raises(SystemExit, match="^error: line 2: " + message):
    score.main(["--workdir", str(workdir), "--input",
                f"{_write(tmp_path / 's', [source, bare])},{_write(tmp_path / 't', ['a', 'b'])}"])
  with pytest.raises(ValueError, match=message):
    translator_lib.Translator(workdir).translate([bare])


def test_the_commands_an_imported_model_cannot_serve_say_what_does_in_one_line(imported_workdir,
                                                                              tmp_path):
  workdir = tmp_path / "opus"
  shutil.copytree(imported_workdir, workdir)
  written = r"holds params written whole \(imported from .*\)"
  refusals = [
      (shortlist.main, [], r"has no training text of its own \(an imported model has none\): "
                           r"pass parallel text to count in, --train SRC,TGT"),
      (average.main, [], written + r", no checkpoints to average: they need none; fine-tune "
                         r"them with t2t-train --finetune_from"),
      (train.main, [], written + r", not a run to resume: fine-tune them into a new work "
                       r"directory, t2t-train --finetune_from .* --workdir NEW --train SRC,TGT"),
      (translate.main, ["--no-average", "--input", "/dev/null"],
       written + r", no checkpoints \(--no-average: the latest checkpoint's params\): read its "
                 r"averaged params"),
      (export.main, ["--to", "ctranslate2", str(tmp_path / "ct2")],
       r"not one with activation='swish', .*: t2t-translate and t2t-serve --engine jax run it; "
       r"for CTranslate2, export it with --to huggingface and convert that with "
       r"ct2-transformers-converter"),
  ]
  for main, flags, message in refusals:
    with pytest.raises(SystemExit, match=f"^error: .*{message}") as e:
      main(["--workdir", str(workdir), *flags])
    assert "\n" not in str(e.value), main
  assert sorted(p.name for p in workdir.iterdir()) == sorted(
      p.name for p in imported_workdir.iterdir())    # nothing was written
