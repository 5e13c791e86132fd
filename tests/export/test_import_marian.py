"""export/import_marian.py: a MarianMTModel imported computes what transformers computes.

The model (`marian_dir`, tests/marian.py) is built and trained briefly here as OPUS-MT's
are published: swish, a final_logits_bias, halves sinusoids, two SentencePiece models
over one vocab.json, Marian's ids. Imported (`imported_workdir`), its teacher-forced
logits are transformers' at every real position, its greedy and beam-4 translations
(no length penalty) are `generate`'s, its export gives back the original files, and a
directory that is not such a model is refused in one line with nothing written.
"""

import json
import shutil

import numpy as np
import pytest

import marian
from export import agreement
from t2t_jax.data import vocab
from t2t_jax.export import exported_search
from t2t_jax.export import huggingface
from t2t_jax.export import import_marian
from t2t_jax.ids import EOS_ID, strip_eos
from t2t_jax.decoding import sentence_batches
from t2t_jax.inference import translator as translator_lib
from t2t_jax.runtime import workdir as workdir_lib

N = 20


@pytest.fixture(scope="module")
def theirs(extras, marian_dir):
  """transformers' model and tokenizer, as the user had them."""
  extras["torch"].set_num_threads(1)   # the tests run two processes on two cores
  transformers = extras["transformers"]
  return (transformers.MarianMTModel.from_pretrained(marian_dir).eval(),
          transformers.MarianTokenizer.from_pretrained(marian_dir))


@pytest.fixture(scope="module")
def translator(imported_workdir):
  return translator_lib.Translator(imported_workdir)


def _generate(torch, model, sources, limits, beam_size):
  """`generate` on Marian's ids, each sentence with our output limit; outputs in Marian's ids."""
  pad, eos = model.config.pad_token_id, model.config.eos_token_id
  outputs = [None] * len(sources)
  for limit, group in exported_search.batches(limits, 64):
    rows = np.full((len(group), max(len(sources[i]) for i in group)), pad)
    for r, i in enumerate(group):
      rows[r, :len(sources[i])] = sources[i]
    inputs = torch.from_numpy(rows)
    with torch.no_grad():
      tokens = model.generate(input_ids=inputs, attention_mask=(inputs != pad).long(),
                              num_beams=beam_size, length_penalty=0.0, do_sample=False,
                              max_length=limit + 1, min_length=2, bad_words_ids=[[pad]])
    for i, row in zip(group, tokens.numpy()[:, 1:].tolist()):
      outputs[i] = row[:row.index(eos)] if eos in row else row
  return outputs


@pytest.mark.exact
def test_teacher_forced_logits_are_transformers_at_every_real_position(extras, theirs,
                                                                       imported_workdir):
  torch = extras["torch"]
  model, tokenizer = theirs
  cfg = workdir_lib.load_config(imported_workdir)
  ours = translator_lib.load_tokenizer(imported_workdir)
  order = huggingface.imported_ids(imported_workdir).order
  pairs = marian.sentences(N, seed=78)
  sources = [ours.encode(en) for en, _ in pairs]
  targets = [ours.encode_target(de) for _, de in pairs]
  # Our ids are theirs permuted: the same pieces.
  assert [list(order[s]) for s in sources] == tokenizer([en for en, _ in pairs])["input_ids"]
  assert [list(order[t]) for t in targets] == tokenizer(
      text_target=[de for _, de in pairs])["input_ids"]
  inputs, outputs = agreement.padded(sources), agreement.padded(targets)
  params = translator_lib.Translator(imported_workdir).params
  logits = np.asarray(agreement.forward(cfg, params, inputs, outputs))
  start = np.full((N, 1), model.config.decoder_start_token_id)
  decoder_inputs = np.concatenate([start, order[outputs[:, :-1]]], axis=1)
  with torch.no_grad():
    their_logits = model(input_ids=torch.from_numpy(order[inputs]),
                         attention_mask=torch.from_numpy(inputs != 0).long(),
                         decoder_input_ids=torch.from_numpy(decoder_inputs)).logits.numpy()
  real = outputs != 0
  difference = np.abs(their_logits[..., order][real] - logits[real]).max()
  print(f"largest logit difference {difference:.2e} (logits up to {np.abs(logits).max():.1f})")
  assert difference < 1e-4


@pytest.mark.exact
def test_greedy_translations_are_transformers(extras, theirs, translator):
  model, tokenizer = theirs
  sources = marian.held_out(N)
  batch = tokenizer(sources, return_tensors="pt", padding=True)
  pad = model.config.pad_token_id
  with extras["torch"].no_grad():
    tokens = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=60,
                            bad_words_ids=[[pad]])
  expected = tokenizer.batch_decode(tokens, skip_special_tokens=True)
  ours = translator.translate(sources, beam_size=1)
  same = sum(a == b for a, b in zip(ours, expected))
  print(f"greedy: {same}/{N} translations identical to transformers'")
  assert same >= N - 1
  assert all(line.strip() for line in ours)   # it ends its sentences: real translations


@pytest.mark.exact
def test_beam_search_without_length_penalty_finds_transformers_best(extras, theirs,
                                                                    imported_workdir, translator):
  model, _ = theirs
  cfg = workdir_lib.load_config(imported_workdir)
  order = huggingface.imported_ids(imported_workdir).order
  ids = [translator.tokenizer.encode(s) for s in marian.held_out(N)]
  limits = exported_search.output_limits(cfg, ids)
  ours = sentence_batches.decode_ids(cfg, translator.params, [i[:-1] for i in ids], beam_size=4,
                                     alpha=0.0, batch_size=N)
  back = np.argsort(order)                                   # Marian id -> ours
  found = [list(back[row]) for row in _generate(extras["torch"], model,
                                                [list(order[i]) for i in ids], limits, 4)]
  assert all(row and EOS_ID not in row for row in ours)
  differ = [i for i in range(N) if found[i] != ours[i]]
  print(f"beam 4, no length penalty: {N - len(differ)}/{N} translations identical to "
        "transformers'")
  # A translation of theirs that is not ours is a tie: our model scores both the same.
  gaps = (agreement.log_probs(cfg, translator.params, [ids[i] for i in differ],
                              [found[i] for i in differ])
          - agreement.log_probs(cfg, translator.params, [ids[i] for i in differ],
                                [ours[i] for i in differ])) if differ else []
  assert all(abs(gap) < agreement.TIE for gap in gaps) and len(differ) <= 1


def test_the_export_gives_back_the_original_weights_and_tokenizer(extras, marian_dir,
                                                                  imported_workdir, tmp_path):
  load = extras["safetensors"].numpy.load_file
  out = huggingface.export_huggingface(imported_workdir, tmp_path / "hf")
  original, exported = load(str(marian_dir / "model.safetensors")), load(str(out / "model.safetensors"))
  assert set(exported) == set(original)
  for name, array in original.items():
    np.testing.assert_array_equal(exported[name], array, err_msg=name)
  for name in huggingface.TOKENIZER_FILES:
    assert (out / name).read_bytes() == (marian_dir / name).read_bytes(), name
  config, theirs = (json.loads((d / "config.json").read_text()) for d in (out, marian_dir))
  for field in ("activation_function", "pad_token_id", "eos_token_id", "decoder_start_token_id",
                "vocab_size", "d_model", "encoder_layers", "max_position_embeddings"):
    assert config[field] == theirs[field], field


def _copy(marian_dir, tmp_path):
  copy = tmp_path / "model"
  shutil.copytree(marian_dir, copy)
  return copy


def _edit_json(path, **fields):
  path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _fewer_embedding_rows(extras, model_dir):
  safetensors = extras["safetensors"].numpy
  state = safetensors.load_file(str(model_dir / "model.safetensors"))
  state["model.shared.weight"] = state["model.shared.weight"][:-5]
  safetensors.save_file(state, str(model_dir / "model.safetensors"))


REFUSALS = {
    "another architecture": (lambda d, _: _edit_json(d / "config.json", model_type="bart",
                                                     architectures=["BartForConditionalGeneration"]),
                             r"model_type is 'bart' \(architectures: BartForConditionalGeneration\)"),
    "pre-norm layers": (lambda d, _: _edit_json(d / "config.json", normalize_before=True),
                        r"normalize_before=True \(pre-norm layers\)"),
    "unscaled embeddings": (lambda d, _: _edit_json(d / "config.json", scale_embedding=False),
                            "scale_embedding=False"),
    "another activation": (lambda d, _: _edit_json(d / "config.json",
                                                   activation_function="gelu_new"),
                           "activation_function is 'gelu_new'"),
    "a missing tokenizer file": (lambda d, _: (d / "target.spm").unlink(), "it has no target.spm"),
    "no weights": (lambda d, _: (d / "model.safetensors").unlink(), "it has no weights"),
    "a vocabulary that is not the embedding's": (
        lambda d, _: _edit_json(d / "vocab.json", **{"▁extra": 10_000}),
        r"vocab.json has \d+ entries with ids 0..10000, but the model has vocab_size=\d+"),
    "an embedding that is not the vocabulary's": (
        lambda d, extras: _fewer_embedding_rows(extras, d), r"its embedding has \d+ rows, not "
                                                            r"vocab_size=\d+"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_what_is_not_a_marian_model_is_refused_in_one_line_and_nothing_is_written(
    extras, marian_dir, tmp_path, case):
  break_it, message = REFUSALS[case]
  model_dir = _copy(marian_dir, tmp_path)
  break_it(model_dir, extras)
  workdir = tmp_path / "runs" / "imported"
  with pytest.raises(ValueError, match=message) as error:
    import_marian.import_marian(model_dir, workdir)
  assert "\n" not in str(error.value) and import_marian.SUPPORTED in str(error.value)
  assert not workdir.exists() and not any((tmp_path / "runs").glob(".*"))


def test_a_failure_while_writing_leaves_nothing_and_a_used_workdir_is_refused(
    marian_dir, tmp_path, monkeypatch):
  workdir = tmp_path / "runs" / "imported"
  seen = []

  def fail(*args, **kwargs):
    seen.append(workdir.exists())     # it appears whole, by a rename, or not at all
    raise OSError("disk full")

  monkeypatch.setattr(import_marian.averaging, "write_params", fail)
  with pytest.raises(OSError, match="disk full"):
    import_marian.import_marian(marian_dir, workdir)
  assert seen == [False]
  assert not workdir.exists() and list((tmp_path / "runs").iterdir()) == []
  workdir.mkdir()
  (workdir / "config.json").write_text("{}")
  with pytest.raises(ValueError, match="already exists: import into a new work directory"):
    import_marian.import_marian(marian_dir, workdir)


def test_the_work_directory_holds_the_options_and_both_tokenizers(marian_dir, imported_workdir):
  cfg = workdir_lib.load_config(imported_workdir)
  assert (cfg.activation, cfg.attention_bias, cfg.output_bias, cfg.position_layout,
          cfg.layer_norm_epsilon) == ("swish", True, True, "halves", 1e-5)
  tokenizer = translator_lib.load_tokenizer(imported_workdir)
  assert tokenizer.target_path == str(imported_workdir / "vocab" / vocab.TARGET_MODEL)
  pieces = json.loads((marian_dir / "vocab.json").read_text())
  marian_ids = huggingface.imported_ids(imported_workdir)
  assert [tokenizer.sp.id_to_piece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"]
  assert (marian_ids.pad, marian_ids.eos, marian_ids.unk) == (len(pieces) - 1, 0, 1)
  for ours, theirs in enumerate(marian_ids.order):
    assert pieces[tokenizer.sp.id_to_piece(ours)] == theirs
  assert strip_eos(tokenizer.encode("The dog.")) == tokenizer.encode("The dog.")[:-1]
