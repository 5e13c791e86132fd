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
  found = [list(back[row]) for row in agreement.marian_generate(
      extras["torch"], model, [list(order[i]) for i in ids], limits, model.config.pad_token_id,
      beam_size=4, min_length=1)]
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


def _original(extras, variant, marian_dir, marian_variant, imported_workdir, imported_variant):
  if variant == "shared":
    return marian_dir, imported_workdir
  return marian_variant(variant), imported_variant(variant)


CONFIGURATIONS = ["shared", *marian.VARIANTS]


@pytest.mark.parametrize("variant", CONFIGURATIONS)
def test_the_export_gives_back_the_original_weights_tokenizer_and_settings(
    extras, marian_dir, marian_variant, imported_workdir, imported_variant, tmp_path, variant):
  model_dir, workdir = _original(extras, variant, marian_dir, marian_variant, imported_workdir,
                                 imported_variant)
  load = extras["safetensors"].numpy.load_file
  out = huggingface.export_huggingface(workdir, tmp_path / "hf")
  original, exported = load(str(model_dir / "model.safetensors")), load(str(out / "model.safetensors"))
  assert set(exported) == set(original)
  for name, array in original.items():
    np.testing.assert_array_equal(exported[name], array, err_msg=name)
  files = [*huggingface.TOKENIZER_FILES, huggingface.TARGET_VOCABULARY]
  for name in files:
    assert (out / name).is_file() == (model_dir / name).is_file(), name
    if (model_dir / name).is_file():
      assert (out / name).read_bytes() == (model_dir / name).read_bytes(), name
  config, theirs = (json.loads((d / "config.json").read_text()) for d in (out, model_dir))
  for field in ("activation_function", "pad_token_id", "eos_token_id", "decoder_start_token_id",
                "vocab_size", "decoder_vocab_size", "d_model", "encoder_layers", "decoder_layers",
                "max_position_embeddings", "share_encoder_decoder_embeddings",
                "tie_word_embeddings", "forced_eos_token_id"):
    assert config[field] == theirs[field], field
  generation = [{k: v for k, v in json.loads((d / "generation_config.json").read_text()).items()
                 if k != "transformers_version"} for d in (out, model_dir)]
  assert generation[0] == generation[1] and generation[0]["num_beams"] == 4
  tokenizer = [json.loads((d / "tokenizer_config.json").read_text()).get("separate_vocabs")
               for d in (out, model_dir)]
  assert tokenizer[0] == tokenizer[1]


def test_a_model_that_transformers_5_untied_imports_as_three_matrices_and_exports_back(
    extras, marian_dir, tmp_path):
  """share_encoder_decoder_embeddings true, tie_word_embeddings false, built and saved by
  transformers 5: each stack reads an embedding of its own and the shared one is unread."""
  torch, transformers = extras["torch"], extras["transformers"]
  config = transformers.MarianConfig.from_pretrained(marian_dir)
  config.tie_word_embeddings = False
  torch.manual_seed(1)
  model = transformers.MarianMTModel(config).eval()
  model_dir = tmp_path / "model"
  model.save_pretrained(model_dir)
  for name in (*huggingface.TOKENIZER_FILES, "tokenizer_config.json"):
    shutil.copyfile(marian_dir / name, model_dir / name)
  workdir = import_marian.import_marian(model_dir, tmp_path / "run")
  assert workdir_lib.load_config(workdir).embeddings == "separate"
  assert set(huggingface.imported_original(workdir).unread) == {huggingface.EMBEDDING}
  # Its logits are transformers'.
  pairs = marian.sentences(4, seed=78)
  _, logits, theirs = _both_logits(torch, model, workdir, pairs)
  assert np.abs(theirs - logits).max() < 1e-4
  out = huggingface.export_huggingface(workdir, tmp_path / "hf")
  load = extras["safetensors"].numpy.load_file
  original, exported = load(str(model_dir / "model.safetensors")), load(str(out / "model.safetensors"))
  assert set(exported) == set(original)
  for name, array in original.items():
    np.testing.assert_array_equal(exported[name], array, err_msg=name)


def _both_logits(torch, model, workdir, pairs):
  """(real positions, our teacher-forced logits, transformers') of `pairs`, in our ids."""
  cfg = workdir_lib.load_config(workdir)
  ours = translator_lib.load_tokenizer(workdir)
  order = huggingface.imported_ids(workdir)
  inputs = agreement.padded([ours.encode(en) for en, _ in pairs])
  outputs = agreement.padded([ours.encode_target(de) for _, de in pairs])
  params = translator_lib.Translator(workdir).params
  logits = np.asarray(agreement.forward(cfg, params, inputs, outputs))
  source, target = order.order, order.target_side.order
  start = np.full((len(pairs), 1), model.config.decoder_start_token_id)
  with torch.no_grad():
    theirs = model(input_ids=torch.from_numpy(source[inputs]),
                   attention_mask=torch.from_numpy(inputs != 0).long(),
                   decoder_input_ids=torch.from_numpy(np.concatenate(
                       [start, target[outputs[:, :-1]]], axis=1))).logits.numpy()
  real = outputs != 0
  return real, logits[real], theirs[..., target][real]


# What each configuration's import says of it: (embeddings, target_vocab_size, decoder_layers,
# activation, language tokens).
IMPORTED = {
    "separate_vocabularies": ("tied_output", True, None, "swish", []),
    "untied_output": ("shared_inputs", False, None, "swish", []),
    "deep_encoder": ("shared", False, 1, "relu", []),
    "multilingual": ("shared", False, None, "swish", [">>deu<<", ">>nld<<"]),
}


@pytest.mark.parametrize("variant", list(marian.VARIANTS))
def test_each_configuration_is_imported_with_the_options_that_say_it(marian_variant,
                                                                     imported_variant, variant):
  model_dir, workdir = marian_variant(variant), imported_variant(variant)
  cfg = workdir_lib.load_config(workdir)
  embeddings, own_target, decoder_layers, activation, languages = IMPORTED[variant]
  config = json.loads((model_dir / "config.json").read_text())
  assert (cfg.embeddings, cfg.decoder_layers, cfg.activation) == (embeddings, decoder_layers,
                                                                   activation)
  assert (cfg.num_layers, cfg.num_decoder_layers) == (config["encoder_layers"],
                                                      config["decoder_layers"])
  assert (cfg.vocab_size, cfg.target_vocab) == (config["vocab_size"], config["decoder_vocab_size"])
  assert (cfg.target_vocab_size is not None) == own_target and cfg.max_len == 512
  tokenizer = translator_lib.load_tokenizer(workdir)
  assert tokenizer.separate == own_target and tokenizer.language_tokens == languages
  assert (tokenizer.vocab_size, tokenizer.target_vocab_size) == (cfg.vocab_size, cfg.target_vocab)
  ids = huggingface.imported_ids(workdir)
  vocabularies = [json.loads((model_dir / name).read_text()) for name in (
      "vocab.json", huggingface.TARGET_VOCABULARY if own_target else "vocab.json")]
  # Our ids 0, 1, 2 are each side's padding, EOS and <unk>; the rest keep Marian's order.
  for side, sp, theirs in ((ids, tokenizer.sp, vocabularies[0]),
                           (ids.target_side, tokenizer.target_sp, vocabularies[1])):
    assert [theirs[sp.id_to_piece(i)] for i in range(sp.get_piece_size())] == list(side.order)
    assert [sp.id_to_piece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"]
    assert list(side.order[3:]) == sorted(side.order[3:])
  assert (ids.target is not None) == own_target


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
        r"vocab.json has \d+ entries with ids 0..10000, but the model has \d+ embedding rows "
        r"for it"),
    "an embedding that is not the vocabulary's": (
        lambda d, extras: _fewer_embedding_rows(extras, d), r"its embedding has \d+ rows, not "
                                                            r"the \d+ of its vocabulary"),
    "stacks of different widths": (
        lambda d, _: _edit_json(d / "config.json", decoder_ffn_dim=64),
        r"its encoder_ffn_dim=128 and decoder_ffn_dim=64 differ \(d_ff is one for both stacks\)"),
    "stacks of different heads": (
        lambda d, _: _edit_json(d / "config.json", decoder_attention_heads=2),
        r"its encoder_attention_heads=4 and decoder_attention_heads=2 differ"),
    "a shared embedding of two sizes": (
        lambda d, _: _edit_json(d / "config.json", decoder_vocab_size=7),
        r"its decoder_vocab_size=7 is not its vocab_size=\d+, but "
        r"share_encoder_decoder_embeddings is true"),
    "a tied copy that is not what it is tied to": (
        lambda d, extras: _untied_copy(extras, d),
        r"its lm_head.weight differs from the matrix tie_word_embeddings=True ties it to"),
    "separate vocabularies without the target's": (
        lambda d, _: _edit_json(d / "tokenizer_config.json", separate_vocabs=True),
        r"it has no target_vocab.json"),
    "an untied output layer without its weights": (
        lambda d, _: _edit_json(d / "config.json", tie_word_embeddings=False),
        r"its weights have no lm_head.weight"),
}


def _untied_copy(extras, model_dir):
  safetensors = extras["safetensors"].numpy
  state = safetensors.load_file(str(model_dir / "model.safetensors"))
  state["lm_head.weight"] = state["model.shared.weight"] + 1
  safetensors.save_file(state, str(model_dir / "model.safetensors"))


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
