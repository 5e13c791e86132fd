"""t2t-score: one line per pair (the sum, then with --per_token each piece's log-probability,
EOS last), as our model computes them; on each imported configuration, transformers'
MarianMTModel's teacher-forced log-probabilities, on short pairs and pairs of a few hundred
pieces; what it refuses, in one line."""

import numpy as np
import pytest

import marian
import trained
from export import agreement
from t2t_jax.cli import score
from t2t_jax.export import huggingface
from t2t_jax.inference import translator as translator_lib
from t2t_jax.runtime import workdir as workdir_lib


def _files(tmp_path, pairs, name="pairs"):
  for side, suffix in ((0, "src"), (1, "tgt")):
    (tmp_path / f"{name}.{suffix}").write_text("".join(pair[side] + "\n" for pair in pairs))
  return f"{tmp_path}/{name}.src,{tmp_path}/{name}.tgt"


def _scores(workdir, spec, tmp_path, *flags):
  """t2t-score's lines, each as (sum, [per-piece log-probabilities] or None)."""
  out = tmp_path / "scores.txt"
  score.main(["--workdir", str(workdir), "--input", spec, "--output", str(out), *flags])
  rows = []
  for line in out.read_text().split("\n")[:-1]:
    total, _, pieces = line.partition("\t")
    rows.append((float(total), [float(x) for x in pieces.split()] if pieces else None))
  return rows, out.read_text()


def test_each_line_is_the_sum_of_the_pieces_and_eos_our_model_gives(trained_workdir, tmp_path):
  sources = trained.held_out_sources(6)
  targets = ["der Hund", "", "die Katze schläft", "ein Haus", "der Mann", "das Auto ist rot"]
  rows, text = _scores(trained_workdir, _files(tmp_path, list(zip(sources, targets))), tmp_path,
                       "--per_token", "--batch_size", "4")
  tokenizer = translator_lib.load_tokenizer(trained_workdir)
  cfg = workdir_lib.load_config(trained_workdir)
  params = translator_lib.Translator(trained_workdir).params
  assert len(rows) == 6 and all(line.count("\t") == 1 for line in text.splitlines())
  assert all(len(field.split(".")[1]) == 6 for field in text.split())   # 6 decimals
  for (total, pieces), source, target in zip(rows, sources, targets):
    ids = tokenizer.encode_target(target)
    assert len(pieces) == len(ids)                       # each piece, EOS last
    assert total == pytest.approx(sum(pieces), abs=1e-5)
    want = agreement.log_probs(cfg, params, [tokenizer.encode(source)], [ids[:-1]])[0]
    assert total == pytest.approx(float(want), abs=2e-5)
  assert len(rows[1][1]) == 1                            # an empty target: EOS alone
  # Without --per_token the sums alone; a .tsv is the same pairs; stdout without --output.
  tsv = tmp_path / "pairs.tsv"
  tsv.write_text("".join(f"{s}\t{t}\n" for s, t in zip(sources, targets)))
  plain, _ = _scores(trained_workdir, str(tsv), tmp_path)
  np.testing.assert_allclose([p for p, _ in plain], [total for total, _ in rows], atol=1e-5)
  assert plain[0][1] is None
  translator = translator_lib.Translator(trained_workdir)
  # Translator.score gives the same numbers (other batches: within float noise).
  np.testing.assert_allclose(translator.score(sources, targets), [t for t, _ in rows], atol=1e-5)
  np.testing.assert_allclose(translator.score(sources, targets, per_token=True)[2], rows[2][1],
                             atol=1e-5)


def test_the_products_and_ensembles_score_and_what_cannot_be_scored_is_refused(
    trained_workdir, tmp_path, capsys):
  pairs = [(s, "der Hund schläft") for s in trained.held_out_sources(3)]
  spec = _files(tmp_path, pairs)
  plain, _ = _scores(trained_workdir, spec, tmp_path)
  # int8 and bfloat16 products score near float32; a model with itself is the model.
  for flags in (["--int8"], ["--dtype", "bfloat16"]):
    other, _ = _scores(trained_workdir, spec, tmp_path, *flags)
    np.testing.assert_allclose([t for t, _ in other], [t for t, _ in plain], rtol=0.02, err_msg=flags)
  pair, _ = _scores(trained_workdir, spec, tmp_path, "--ensemble", str(trained_workdir))
  np.testing.assert_allclose([t for t, _ in pair], [t for t, _ in plain], atol=1e-5)
  with pytest.raises(SystemExit) as e:
    score.main(["--workdir", str(trained_workdir), "--input", spec, "--shortlist"])
  assert e.value.code == 2 and "--shortlist: scores are over the whole vocabulary" in (
      capsys.readouterr().err)
  long = _files(tmp_path, pairs + [(" ".join(["dog"] * 70), "der Hund")], "long")
  with pytest.raises(SystemExit, match=r"^error: line 4: its source has \d+ pieces with EOS, "
                                       r"more than the model's 64 positions") as e:
    score.main(["--workdir", str(trained_workdir), "--input", long])
  assert "\n" not in str(e.value)


def _long_pairs(variant, count, sentences=30):
  """`count` pairs of `sentences` held-out pairs each, one language's (a multilingual source
  keeps one language token at its start)."""
  pairs = marian.pairs(variant, count * sentences * 2, seed=91)
  if variant == "multilingual":
    pairs = pairs[::2]                                  # >>deu<< only
  out = []
  for k in range(count):
    chunk = pairs[k * sentences:(k + 1) * sentences]
    first = chunk[0][0].split(" ")[0] + " " if variant == "multilingual" else ""
    out.append((first + " ".join(en[len(first):] for en, _ in chunk),
                " ".join(de for _, de in chunk)))
  return out


def _theirs(torch, model, tokenizer, pairs):
  """MarianMTModel's log-probability of each target piece and EOS, one pair at a time."""
  found = []
  for source, target in pairs:
    inputs = tokenizer(source)["input_ids"]
    labels = tokenizer(text_target=target)["input_ids"]
    decoder = [model.config.decoder_start_token_id, *labels[:-1]]
    with torch.no_grad():
      logits = model(input_ids=torch.tensor([inputs]),
                     decoder_input_ids=torch.tensor([decoder])).logits[0]
    found.append((inputs, labels, torch.log_softmax(logits, -1)[range(len(labels)), labels].numpy()))
  return found


@pytest.mark.exact
@pytest.mark.parametrize("variant", ["shared", *marian.VARIANTS])
def test_per_token_scores_are_marian_mt_models_teacher_forced_log_probabilities(
    extras, marian_dir, marian_variant, imported_workdir, imported_variant, variant, tmp_path):
  torch, transformers = extras["torch"], extras["transformers"]
  torch.set_num_threads(1)   # the tests run two processes on two cores
  model_dir, workdir = ((marian_dir, imported_workdir) if variant == "shared" else
                        (marian_variant(variant), imported_variant(variant)))
  short = marian.held_out_pairs(variant, 12)
  # A few hundred pieces a side (the first model has 128 positions: a hundred).
  long = _long_pairs(variant, 2, sentences=9 if variant == "shared" else 30)
  rows, _ = _scores(workdir, _files(tmp_path, short + long), tmp_path, "--per_token")
  model = transformers.MarianMTModel.from_pretrained(model_dir).eval()
  tokenizer = transformers.MarianTokenizer.from_pretrained(model_dir)
  ours = translator_lib.load_tokenizer(workdir)
  ids = huggingface.imported_ids(workdir)
  worst = 0.0
  for (total, pieces), (inputs, labels, theirs), (source, target) in zip(
      rows, _theirs(torch, model, tokenizer, short + long), short + long):
    # The same pieces (our ids are theirs permuted), and each one's log-probability.
    assert list(ids.order[ours.encode(source)]) == inputs
    assert list(ids.target_side.order[ours.encode_target(target)]) == labels
    assert len(pieces) == len(labels)
    worst = max(worst, np.abs(np.asarray(pieces) - theirs).max())
  lengths = [len(pieces) for _, pieces in rows[len(short):]]
  lengths += [len(ours.encode(source)) for source, _ in long]
  print(f"{variant}: per-piece log-probabilities within {worst:.1e} of transformers' "
        f"(long pairs of {min(lengths)} to {max(lengths)} pieces a side)")
  assert min(lengths) > (80 if variant == "shared" else 200) and worst < 1e-4
