"""configs.py: validation, parameter counts vs the real model and Table 3."""

import functools
import re
import typing

import jax
import pytest

from t2t_jax import configs
from t2t_jax.cli import flags
from t2t_jax.configs import count_params, get_config
from t2t_jax.recipes import paper


def _real_count(cfg):
  shapes = jax.eval_shape(functools.partial(_init_params(), cfg.model), jax.random.key(0))
  return sum(x.size for x in jax.tree.leaves(shapes))


def _init_params():
  from t2t_jax.model import transformer   # imported lazily: the validation tests need no JAX model
  return transformer.init_params


def _shape_key(cfg):
  """The fields that decide parameter shapes: presets equal on these share one trace."""
  return (cfg.vocab_size, cfg.target_vocab, cfg.num_layers, cfg.num_decoder_layers, cfg.d_model,
          cfg.d_ff, cfg.num_heads, cfg.key_depth, cfg.value_depth, cfg.embeddings,
          cfg.positional_encoding, cfg.max_len if cfg.positional_encoding == "learned" else None)


def test_count_params_equals_the_real_model_for_every_preset():
  cfgs = [get_config(name) for name in configs.PRESETS]
  cfgs.append(get_config("demo", embeddings="separate", positional_encoding="learned",
                         d_k=24, d_v=40))
  # Each embedding mode, a target vocabulary of its own and another decoder depth.
  cfgs += [get_config("demo", embeddings=mode, decoder_layers=1, output_bias=True,
                      target_vocab_size=700 if mode in configs.OWN_TARGET_VOCABULARY else None)
           for mode in configs.EMBEDDINGS]
  unique = {_shape_key(c): c for c in cfgs}
  assert len(unique) >= 18          # every structurally distinct preset is traced
  for cfg in unique.values():
    assert count_params(cfg) == _real_count(cfg), cfg


def test_count_params_with_the_published_models_biases():
  cfg = get_config("demo", attention_bias=True, output_bias=True, activation="swish",
                   position_layout="halves", layer_norm_epsilon=1e-5)
  plain = get_config("demo")
  d, layers = plain.d_model, plain.num_layers
  # 4 biases of d per attention (d_k = d_v = d / h), 3 attentions a layer pair; one per id.
  assert count_params(cfg) - count_params(plain) == layers * 3 * 4 * d + plain.vocab_size
  assert count_params(cfg) == _real_count(cfg)


def test_the_published_models_options_default_to_the_papers():
  cfg = get_config("base")
  assert (cfg.activation, cfg.attention_bias, cfg.output_bias, cfg.position_layout,
          cfg.layer_norm_epsilon, cfg.embeddings, cfg.target_vocab_size,
          cfg.decoder_layers) == ("relu", False, False, "interleaved", 1e-6, "shared", None, None)


def test_table3_counts_within_7_percent_of_the_paper():
  assert set(paper.PARAMS_M) == {"base", "B1", "B2", "C1", "C2", "C3", "C4", "C5", "C6", "C7",
                                 "big"}
  for name, theirs in paper.PARAMS_M.items():
    ours = count_params(get_config(name, vocab_size=37000)) / 1e6
    assert abs(ours - theirs) / theirs < 0.07, (name, ours, theirs)


def test_count_params_by_hand_for_base():
  # 6 x (encoder 4*512^2 attention + FFN + 2 norms; decoder 2 attentions + FFN + 3 norms)
  # + one 37000 x 512 matrix shared by both embeddings and the softmax.
  ffn = 2 * 512 * 2048 + 2048 + 512
  encoder = 4 * 512 * 512 + ffn + 2 * 2 * 512
  decoder = 8 * 512 * 512 + ffn + 3 * 2 * 512
  assert count_params(get_config("base")) == 6 * (encoder + decoder) + 37000 * 512
  base = count_params(get_config("base"))
  assert count_params(get_config("base", embeddings="separate")) - base == 2 * 37000 * 512
  assert count_params(get_config("base", embeddings="shared_inputs")) - base == 37000 * 512
  # A 9000-piece target vocabulary: its embedding tied to the output layer.
  assert count_params(get_config("base", embeddings="tied_output", target_vocab_size=9000)) \
      - base == 9000 * 512
  assert count_params(get_config("base", decoder_layers=1)) == 6 * encoder + decoder + 37000 * 512


@pytest.mark.parametrize("kwargs, message", [
    (dict(d_model=500), "d_model=500 is not divisible by num_heads=8"),
    (dict(dropout_rate=-0.1), "dropout_rate=-0.1"),
    (dict(attention_dropout_rate=1.0), "attention_dropout_rate=1.0"),
    (dict(label_smoothing=-0.2), "label_smoothing=-0.2"),
    (dict(num_layers=0), "num_layers=0"),
    (dict(d_k=-4), "d_k=-4"),
    (dict(attention_window=0), "attention_window=0"),
    (dict(positional_encoding="rotary"), "positional_encoding='rotary'"),
    (dict(dtype="float16"), "dtype='float16'"),
    (dict(no_such_field=1), "unknown config field"),
])
def test_bad_settings_raise_value_error_naming_the_value(kwargs, message):
  with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
    get_config("base", **kwargs)


def test_a_target_vocabulary_of_its_own_needs_a_target_embedding_of_its_own():
  with pytest.raises(ValueError, match=r"^target_vocab_size=900 needs a target embedding of its "
                                       r"own: embeddings='shared_inputs' shares the source's; set "
                                       r"embeddings to 'tied_output' or 'separate'$"):
    get_config("demo", embeddings="shared_inputs", target_vocab_size=900)
  cfg = get_config("demo", embeddings="tied_output", target_vocab_size=900)
  assert (cfg.vocab_size, cfg.target_vocab, cfg.model.target_vocab) == (1000, 900, 900)
  assert (cfg.num_decoder_layers, cfg.replace(decoder_layers=1).model.num_decoder_layers) == (3, 1)


def test_d_model_not_divisible_is_fine_with_explicit_depths():
  cfg = get_config("base", d_model=500, d_k=50, d_v=60)
  assert (cfg.key_depth, cfg.value_depth) == (50, 60)


def test_unknown_preset_raises():
  with pytest.raises(ValueError, match="unknown config 'huge'"):
    get_config("huge")


def test_from_dict_reads_old_work_directories_and_names_unknown_fields():
  cfg = get_config("C4", dropout_rate=0.2)
  assert configs.from_dict(configs.to_dict(cfg)) == cfg
  old = {**configs.to_dict(cfg), "shuffle_buffer_batches": 0}  # retired, never used
  assert configs.from_dict(old) == cfg
  # share_embeddings, which the embedding modes replaced, reads as its mode; a field an
  # old config.json lacks is its default.
  old = configs.to_dict(cfg)
  for name in ("embeddings", "target_vocab_size", "decoder_layers"):
    del old[name]
  assert configs.from_dict({**old, "share_embeddings": True}) == cfg
  assert configs.from_dict({**old, "share_embeddings": False}) == cfg.replace(
      embeddings="separate")
  with pytest.raises(ValueError, match=r"runs/x/config.json has unknown config field\(s\) "
                                       r"\['d_modle'\]"):
    configs.from_dict({**configs.to_dict(cfg), "d_modle": 3}, "runs/x/config.json")


# One value out of range per field that has a range: a new rule needs a line here.
_OUT_OF_RANGE = {
    "vocab_size": 3, "num_layers": 0, "d_model": -8, "d_ff": 0, "num_heads": 0, "d_k": 0,
    "d_v": -1, "dropout_rate": 1.0, "attention_dropout_rate": -0.5,
    "positional_encoding": "rotary", "max_len": 0, "dtype": "float16", "attention_window": 0,
    "quantization": "int4",
    "activation": "tanh", "position_layout": "rotated", "layer_norm_epsilon": 0.0,
    "embeddings": "tied", "target_vocab_size": 3, "decoder_layers": 0,
    "attention_impl": "flash",
    "dropout_generator": "philox",
    "dataset": "", "source_lang": "", "target_lang": "", "data_dir": "", "train_files": "",
    "dev_files": "", "test_files": "", "vocab_type": "sentencepiece",
    "vocab_sample_sentences": 0, "max_source_length": 0, "max_target_length": -3,
    "tokens_per_batch": 0, "max_tokens_per_device": 0, "memory_margin": 1.0,
    "unroll_micro_steps": 0,
    "seed": -1, "num_train_steps": 0, "warmup_steps": 0, "learning_rate_scale": 0.0,
    "adam_b1": 1.0, "adam_b2": 1.5, "adam_eps": 0.0, "label_smoothing": 1.0,
    "log_every_steps": 0, "eval_every_steps": 0, "num_eval_batches": 0, "peak_tflops": -1.0,
    "parallelism": "pjit",
    "checkpoint_every_steps": 0, "checkpoint_every_minutes": 0.0, "average_last": 0,
    "beam_size": 0, "alpha": -0.1, "max_decode_extra": -1, "decode_batch_size": 0,
}
_FIELDS = typing.get_type_hints(configs.TransformerConfig)


def _wrong_type(name):
  kind, _ = configs._base_type(_FIELDS[name])
  return {int: 2.5, float: "fast", str: 7, bool: 1}[kind]


def test_every_field_but_the_flags_has_a_range_and_a_test():
  assert set(configs.FIELD_RULES) == set(_OUT_OF_RANGE)
  assert set(_FIELDS) - set(configs.FIELD_RULES) == {"compilation_cache", "packing",
                                                      "attention_bias", "output_bias"}


@pytest.mark.parametrize("name", sorted(_FIELDS))
def test_every_field_rejects_a_wrong_type_and_an_out_of_range_value(name):
  bad = [_wrong_type(name), float("nan") if _FIELDS[name] is float else None]
  if name in _OUT_OF_RANGE:
    bad.append(_OUT_OF_RANGE[name])
  if configs._base_type(_FIELDS[name])[1]:
    bad.remove(None)  # Optional fields accept None
  for value in bad:
    with pytest.raises(ValueError) as error:
      get_config("base", **{name: value})
    message = str(error.value)
    assert message == f"{name}={value!r}: accepts {configs.accepts(name)}", message
  assert get_config("base", **{name: getattr(get_config("demo"), name)})  # a good value passes


@pytest.mark.parametrize("name", sorted(_FIELDS))
def test_command_line_errors_name_the_field_and_what_it_accepts(name, capsys):
  kind, _ = configs._base_type(_FIELDS[name])
  text = {int: "2.5", float: "fast", bool: "maybe"}.get(kind)
  if text is not None:  # any text is a string
    with pytest.raises(SystemExit):
      flags.parse_config([f"--config.{name}={text}"])
    err = capsys.readouterr().err
    assert re.search(f"argument --config.{name}: bad value '{text}': {name} "
                     f"accepts {re.escape(configs.accepts(name))} ", err), err
  if name in _OUT_OF_RANGE:
    value = _OUT_OF_RANGE[name]
    with pytest.raises(ValueError, match=f"^{name}="):
      flags.parse_config([f"--config.{name}={value}"])


def test_accepts_describes_optional_and_enumerated_fields():
  assert configs.accepts("d_k") == "a positive integer or None"
  assert configs.accepts("dtype") == "one of 'float32', 'bfloat16'"
  assert configs.accepts("packing") == "true or false"
  assert configs.accepts("embeddings") == ("one of 'shared', 'shared_inputs', 'tied_output', "
                                           "'separate'")
  assert get_config("base", learning_rate_scale=2).learning_rate_scale == 2  # an int is a number


def test_model_config_holds_the_model_fields_only():
  cfg = configs.get_config("demo")
  hints = typing.get_type_hints(configs.TransformerConfig)
  model_hints = typing.get_type_hints(configs.ModelConfig)
  assert set(model_hints) == set(configs.MODEL_FIELDS)
  assert all(model_hints[name] == hints[name] for name in configs.MODEL_FIELDS)
  assert {name: getattr(cfg.model, name) for name in configs.MODEL_FIELDS} == {
      name: getattr(cfg, name) for name in configs.MODEL_FIELDS}
  assert (cfg.model.key_depth, cfg.model.value_depth) == (cfg.key_depth, cfg.value_depth)
  # A run field leaves the model config (a jitted function's static argument) equal...
  assert cfg.replace(eval_every_steps=7, beam_size=2, seed=3).model == cfg.model
  # ...a model field does not.
  assert cfg.replace(d_ff=64).model != cfg.model


def _as_paper_states(cfg, names):
  """`cfg`'s values of the paper's settings `names` (d_k, d_v as the depths they resolve to)."""
  depth = {"d_k": cfg.key_depth, "d_v": cfg.value_depth}
  return {name: depth.get(name, getattr(cfg, name, None)) for name in names}


@pytest.mark.parametrize("name", ["base", "big", "base_enfr", "big_enfr"])
def test_wmt14_presets_hold_the_papers_settings(name):
  # Sections 5 and 6: model sizes, steps, Adam, warmup, label smoothing, dropout (big En-De
  # 0.3, big En-Fr 0.1), vocabulary, batch tokens, beam 4, alpha 0.6, input + 50, and the
  # last 5 (big: 20) checkpoints written every 10 minutes averaged.
  cfg, want = get_config(name), paper.settings(name)
  assert _as_paper_states(cfg, want) == want
  assert cfg.checkpoint_every_steps is None           # by time only, as the paper
  assert cfg.dataset == f"wmt14_translate/{want['target_lang']}-en" and cfg.source_lang == "en"


@pytest.mark.parametrize("row", list(paper.TABLE3))
def test_table3_presets_are_the_papers_rows(row):
  want = paper.table3_settings(row)
  cfg = get_config(row)
  assert _as_paper_states(cfg, want) == want
  # The columns Table 3 leaves alone stay the base model's.
  base = get_config("base")
  assert (cfg.warmup_steps, cfg.beam_size, cfg.alpha, cfg.vocab_size) == (
      base.warmup_steps, base.beam_size, base.alpha, base.vocab_size)


def test_parsing_preset_holds_section_6_3():
  assert _as_paper_states(get_config("parsing"), paper.PARSING) == paper.PARSING


def test_every_field_has_a_one_line_meaning():
  for name in _FIELDS:
    text = configs.meaning(name)
    assert text and "\n" not in text and len(text) < 100, (name, text)
