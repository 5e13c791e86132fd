"""One typed config for every experiment, and the paper's named settings as data.

`get_config(name, **overrides)` returns a frozen `TransformerConfig`. The names
are the paper's: "base" and "big" (Table 3's first and last rows, on WMT14
En-De), "base_enfr" and "big_enfr" (the same models on WMT14 En-Fr, big with
P_drop 0.1 as section 6.1 says), Table 3's rows in order ("A1".."A4", "B1",
"B2", "C1".."C7", "D1".."D4", "E"), "parsing" (section 6.3), plus "demo", a
small model that trains on the generated corpus in minutes on a CPU.

The config is flat on purpose: model, data, training, checkpointing and decoding
fields live side by side so that `--config.<field>=<value>` (cli/flags.py) reaches any
of them. The model reads only the model fields. Each field carries its one-line
meaning (`meaning(name)`, shown by `--help`); what it accepts is `accepts(name)`.
The paper's reported figures (BLEU, perplexities, parameter counts) live in
t2t_jax/recipes/paper.py.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Optional


# tensor2tensor's layer-norm epsilon, the default of `layer_norm_epsilon`.
LAYER_NORM_EPSILON = 1e-6


def _field(default: Any, meaning: str) -> Any:
  """A config field with its one-line meaning, which `--help` shows (`meaning(name)`)."""
  return dataclasses.field(default=default, metadata={"meaning": meaning})


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Every setting of one experiment. Defaults are the paper's base model."""

  # --- Model (section 3, Table 3 columns) ---
  vocab_size: int = _field(
      37000, "source+target vocabulary size (the source's alone with target_vocab_size); 0: padding")
  num_layers: int = _field(
      6, "N: layers in the encoder and in the decoder (the encoder's alone with decoder_layers)")
  d_model: int = _field(512, "width of every layer's input and output (and the embeddings)")
  d_ff: int = _field(2048, "inner width of the position-wise feed-forward layers")
  num_heads: int = _field(8, "h: attention heads per attention layer")
  d_k: Optional[int] = _field(None, "query/key depth per head; None: d_model // num_heads")
  d_v: Optional[int] = _field(None, "value depth per head; None: d_model // num_heads")
  dropout_rate: float = _field(
      0.1, "P_drop: dropout on sub-layer outputs and on embeddings + positions")
  # "hash" is an index hash that XLA fuses and the backward pass recomputes;
  # "threefry" is jax.random.bernoulli (kernels/dropout.py).
  dropout_generator: str = _field("hash", "how dropout masks are drawn: hash or threefry")
  attention_dropout_rate: float = _field(
      0.0, "dropout on attention probabilities (tuned for parsing)")
  positional_encoding: str = _field(
      "sinusoidal", "sinusoidal, or learned position embeddings (Table 3 row E)")
  max_len: int = _field(512, "longest position the model supports (learned table size)")
  # Which of the source embedding, the target embedding and the pre-softmax projection are
  # one matrix: all three (section 3.4), the two embeddings, the target embedding and the
  # projection, or none (model/transformer.py's EMBEDDING_PARAMS; docs/model.md).
  embeddings: str = _field(
      "shared", "which embedding matrices are one: shared, shared_inputs, tied_output, separate")
  dtype: str = _field("float32", "compute dtype: float32 or bfloat16; training keeps params "
                      "float32, decoding casts weights at load")
  attention_window: Optional[int] = _field(
      None, "restricted self-attention radius r (Table 1); None: full attention")
  # "fused": kernels/fused_attention.py (cuDNN flash attention on NVIDIA GPUs
  # in bfloat16, attention_core elsewhere) where it applies, the reference where it must
  # (attention maps, attention dropout, windows, d_k != d_v); kernels/choice.py chooses.
  # "cudnn", "core" or "core_recompute" (attention_core keeping no probabilities: its
  # backward pass computes them again) name fused_attention's kernel whatever the backend
  # (t2t-compile sets them for its target: accelerators/kernels.py); "cudnn" that
  # cannot run is an error.
  attention_impl: str = _field(
      "fused", "fused (a fused kernel where it applies), reference, or cudnn/core/core_recompute "
      "(that kernel)")
  # Decoding only (quantization/quantized.py converts float32 params at load; training refuses it).
  quantization: Optional[str] = _field(
      None, "decoding only: int8 or bfloat16 weights and products (docs/model.md), or None")
  # Where published models of this architecture depart from the paper (OPUS-MT's Marian
  # models, imported by export/import_marian.py; docs/model.md). Each default is the paper's.
  activation: str = _field(
      "relu", "the feed-forward activation: relu (the paper's), swish (x sigmoid x), gelu (erf)")
  attention_bias: bool = _field(
      False, "biases on the attention projections W^Q, W^K, W^V, W^O (the paper has none)")
  output_bias: bool = _field(False, "a bias on the pre-softmax logits, one per vocabulary id")
  position_layout: str = _field(
      "interleaved", "sinusoids interleaved (section 3.5's formula) or halves (sines, then cosines)")
  layer_norm_epsilon: float = _field(
      LAYER_NORM_EPSILON, "epsilon of every layer norm (tensor2tensor's 1e-6; torch's 1e-5)")
  target_vocab_size: Optional[int] = _field(
      None, "the target side's own vocabulary size (embeddings tied_output, separate); None: same")
  decoder_layers: Optional[int] = _field(
      None, "layers in the decoder where it has another depth than the encoder; None: num_layers")

  # --- Data (section 5.1) ---
  dataset: str = _field("wmt14_translate/de-en",
                        "a tfds name, demo (generated corpus), or text (the *_files below)")
  source_lang: str = _field("en", "source language code (of the tfds dataset)")
  target_lang: str = _field("de", "target language code (of the tfds dataset)")
  data_dir: Optional[str] = _field(
      None, "tfds data_dir; None: $TFDS_DATA_DIR or tfds's default")
  train_files: Optional[str] = _field(
      None, "dataset=text: training pairs, 'src_path,tgt_path' or a .tsv path")
  dev_files: Optional[str] = _field(
      None, "dataset=text: dev pairs (dev loss), 'src_path,tgt_path' or a .tsv path")
  test_files: Optional[str] = _field(
      None, "dataset=text: test pairs (test BLEU; None: no test set)")
  vocab_type: str = _field("bpe", "SentencePiece model type: bpe, unigram, char or word")
  vocab_sample_sentences: int = _field(
      2_000_000, "sentences sampled to train the SentencePiece vocabulary")
  max_source_length: int = _field(
      256, "training pairs with a longer source (in pieces) are dropped and counted")
  max_target_length: int = _field(
      256, "training pairs with a longer target (in pieces) are dropped and counted")
  tokens_per_batch: int = _field(
      25000, "tokens per side per update, across all devices and micro-steps")
  # More than one micro-step per update means gradient accumulation.
  max_tokens_per_device: Optional[int] = _field(
      None, "tokens per micro-step on one device; None: the most that fits in its memory")
  memory_margin: float = _field(
      0.1, "share of device memory left free when max_tokens_per_device is None")
  # Above 1, XLA sees that many micro-steps side by side and runs their small
  # operations at once (on a CPU they fill the cores one micro-step leaves idle),
  # but their activations may all be live at once: the memory choice above sizes one.
  unroll_micro_steps: int = _field(
      1, "micro-steps per iteration of the accumulation loop (lax.scan's unroll)")
  # Rows as long as the longest bucket: almost no padding and one batch shape.
  packing: bool = _field(
      True, "several sentence pairs per training row (dev/test batches are never packed)")
  seed: int = _field(0, "the one root of all randomness (init, dropout, batch order)")

  # --- Training (section 5.3, 5.4) ---
  num_train_steps: int = _field(100_000, "updates to train (may grow when resuming)")
  warmup_steps: int = _field(4000, "steps of linear learning-rate warmup (section 5.3)")
  learning_rate_scale: float = _field(1.0, "multiplies the paper's learning-rate schedule")
  adam_b1: float = _field(0.9, "Adam beta1")
  adam_b2: float = _field(0.98, "Adam beta2")
  adam_eps: float = _field(1e-9, "Adam epsilon")
  label_smoothing: float = _field(0.1, "eps_ls: label smoothing of the training loss")
  log_every_steps: int = _field(100, "steps between training-metric lines")
  eval_every_steps: int = _field(1000, "steps between dev-set evaluations")
  num_eval_batches: Optional[int] = _field(None, "dev batches per evaluation; None: all")
  peak_tflops: Optional[float] = _field(
      None, "peak TFLOP/s per device, for MFU; None: looked up by device kind")
  parallelism: str = _field(
      "pmap", "how steps map over devices: pmap or shard_map (train/step.py)")
  compilation_cache: bool = _field(True, "use JAX's persistent compilation cache")

  # --- Checkpoints (section 6.1) ---
  checkpoint_every_steps: Optional[int] = _field(None, "save a checkpoint every this many steps")
  checkpoint_every_minutes: Optional[float] = _field(
      10.0, "save a checkpoint every this many minutes (section 6.1: 10)")
  average_last: int = _field(5, "checkpoints averaged for evaluation (base 5, big 20)")

  # --- Decoding (section 6.1) ---
  beam_size: int = _field(4, "beam search width")
  alpha: float = _field(0.6, "GNMT length penalty exponent")
  max_decode_extra: int = _field(50, "max output length = input length + this")
  decode_batch_size: int = _field(64, "sentences per decoding batch")

  @property
  def key_depth(self) -> int:
    return self.d_k if self.d_k is not None else self.d_model // self.num_heads

  @property
  def value_depth(self) -> int:
    return self.d_v if self.d_v is not None else self.d_model // self.num_heads

  @property
  def target_vocab(self) -> int:
    """The target side's vocabulary size: the output layer's rows."""
    return self.target_vocab_size if self.target_vocab_size is not None else self.vocab_size

  @property
  def num_decoder_layers(self) -> int:
    return self.decoder_layers if self.decoder_layers is not None else self.num_layers

  @property
  def model(self) -> "ModelConfig":
    """The model's own fields: what the model classes and the compiled programs take.

    Jitted functions take this as their static argument rather than the whole run
    config, so changing a training or data field does not recompile decoding.
    """
    return ModelConfig(**{name: getattr(self, name) for name in MODEL_FIELDS})

  def __post_init__(self):
    _validate(self)

  def replace(self, **overrides: Any) -> "TransformerConfig":
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(self)})
    if unknown:
      raise ValueError(f"unknown config field(s) {unknown}; see t2t_jax/configs.py for the list")
    return dataclasses.replace(self, **overrides)


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The fields the model reads (section 3 and Table 3's columns); `TransformerConfig.model`.

  Each field means what the same field of `TransformerConfig` means; values are
  checked there. Hashable and small: it is the static argument of every jitted
  model function.
  """

  vocab_size: int
  num_layers: int
  d_model: int
  d_ff: int
  num_heads: int
  d_k: Optional[int]
  d_v: Optional[int]
  dropout_rate: float
  dropout_generator: str
  attention_dropout_rate: float
  positional_encoding: str
  max_len: int
  embeddings: str
  dtype: str
  attention_window: Optional[int]
  attention_impl: str
  quantization: Optional[str]
  activation: str
  attention_bias: bool
  output_bias: bool
  position_layout: str
  layer_norm_epsilon: float
  target_vocab_size: Optional[int]
  decoder_layers: Optional[int]

  key_depth = TransformerConfig.key_depth
  value_depth = TransformerConfig.value_depth
  target_vocab = TransformerConfig.target_vocab
  num_decoder_layers = TransformerConfig.num_decoder_layers


MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig))
_FIELDS_BY_NAME = {f.name: f for f in dataclasses.fields(TransformerConfig)}


# What each field accepts, in one place: (check, description). Types come from the
# annotations (`_type_ok`); a field absent here accepts any value of its type.
def _positive(v) -> bool:
  return v > 0


def _non_negative(v) -> bool:
  return v >= 0


def _fraction(v) -> bool:
  return 0.0 <= v < 1.0


def _one_of(*choices: str) -> tuple[Any, str]:
  return (lambda v: v in choices), "one of " + ", ".join(repr(c) for c in choices)


DROPOUT_GENERATORS = ("hash", "threefry")  # kernels/dropout.py draws masks with either
ACTIVATIONS = ("relu", "swish", "gelu")     # model/layers.py's FeedForward computes each
POSITION_LAYOUTS = ("interleaved", "halves")   # model/layers.py's sinusoidal_encoding
# Which matrices are one (model/transformer.py's `EMBEDDING_PARAMS` names each's parameters).
EMBEDDINGS = ("shared", "shared_inputs", "tied_output", "separate")
# The modes whose target side is a matrix apart from the source embedding: its own vocabulary.
OWN_TARGET_VOCABULARY = ("tied_output", "separate")

_POSITIVE_INT = (_positive, "a positive integer")
_POSITIVE_NUMBER = (_positive, "a positive number")
_FRACTION = (_fraction, "a number in [0, 1)")
_NON_EMPTY = (bool, "a non-empty string")
_VOCABULARY = ((lambda v: v >= 4), "an integer >= 4 (3 ids are reserved)")

FIELD_RULES: dict[str, tuple[Any, str]] = {
    "vocab_size": _VOCABULARY,
    "num_layers": _POSITIVE_INT, "d_model": _POSITIVE_INT, "d_ff": _POSITIVE_INT,
    "num_heads": _POSITIVE_INT, "d_k": _POSITIVE_INT, "d_v": _POSITIVE_INT,
    "dropout_rate": _FRACTION, "attention_dropout_rate": _FRACTION,
    "dropout_generator": _one_of(*DROPOUT_GENERATORS),
    "positional_encoding": _one_of("sinusoidal", "learned"),
    "max_len": _POSITIVE_INT,
    "dtype": _one_of("float32", "bfloat16"),
    "attention_window": _POSITIVE_INT,
    "attention_impl": _one_of("fused", "reference", "cudnn", "core", "core_recompute"),
    "quantization": _one_of("int8", "bfloat16"),
    "activation": _one_of(*ACTIVATIONS), "position_layout": _one_of(*POSITION_LAYOUTS),
    "layer_norm_epsilon": _POSITIVE_NUMBER, "embeddings": _one_of(*EMBEDDINGS),
    "target_vocab_size": _VOCABULARY,
    "decoder_layers": _POSITIVE_INT,
    "dataset": _NON_EMPTY, "source_lang": _NON_EMPTY, "target_lang": _NON_EMPTY,
    "data_dir": _NON_EMPTY, "train_files": _NON_EMPTY, "dev_files": _NON_EMPTY,
    "test_files": _NON_EMPTY,
    "vocab_type": _one_of("bpe", "unigram", "char", "word"),
    "vocab_sample_sentences": _POSITIVE_INT,
    "max_source_length": _POSITIVE_INT, "max_target_length": _POSITIVE_INT,
    "tokens_per_batch": _POSITIVE_INT, "max_tokens_per_device": _POSITIVE_INT,
    "unroll_micro_steps": _POSITIVE_INT,
    "memory_margin": _FRACTION,
    "seed": ((lambda v: 0 <= v < 2**63), "an integer in [0, 2**63)"),
    "num_train_steps": _POSITIVE_INT, "warmup_steps": _POSITIVE_INT,
    "learning_rate_scale": _POSITIVE_NUMBER,
    "adam_b1": _FRACTION, "adam_b2": _FRACTION, "adam_eps": _POSITIVE_NUMBER,
    "label_smoothing": _FRACTION,
    "log_every_steps": _POSITIVE_INT, "eval_every_steps": _POSITIVE_INT,
    "num_eval_batches": _POSITIVE_INT, "peak_tflops": _POSITIVE_NUMBER,
    "parallelism": _one_of("pmap", "shard_map"),
    "checkpoint_every_steps": _POSITIVE_INT, "checkpoint_every_minutes": _POSITIVE_NUMBER,
    "average_last": _POSITIVE_INT,
    "beam_size": _POSITIVE_INT, "alpha": (_non_negative, "a number >= 0"),
    "max_decode_extra": (_non_negative, "an integer >= 0"),
    "decode_batch_size": _POSITIVE_INT,
}


def _base_type(hint: Any) -> tuple[type, bool]:
  """(type, whether None is allowed) of a field annotation such as Optional[int]."""
  if typing.get_origin(hint) is typing.Union:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0], True
  return hint, False


def _type_ok(kind: type, value: Any) -> bool:
  if kind is float:  # an int is a fine float; a bool is neither
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      return False
    try:
      return math.isfinite(value)
    except OverflowError:  # an int too large for a float
      return False
  if kind is int:
    return isinstance(value, int) and not isinstance(value, bool)
  return isinstance(value, kind)


def meaning(name: str) -> str:
  """Field `name`'s one-line meaning (for --help)."""
  return _FIELDS_BY_NAME[name].metadata["meaning"]


def accepts(name: str) -> str:
  """What field `name` accepts, in words (for error messages)."""
  kind, optional = _base_type(typing.get_type_hints(TransformerConfig)[name])
  _, words = FIELD_RULES.get(name, (None, {bool: "true or false", str: "a string",
                                           int: "an integer", float: "a number"}[kind]))
  return words + (" or None" if optional else "")


# Fields that earlier versions wrote to config.json and that never changed behaviour.
_RETIRED_FIELDS = frozenset({"shuffle_buffer_batches"})
# Fields that earlier versions wrote and the field that says the same now, by value.
_RENAMED_FIELDS = {"share_embeddings": ("embeddings", {True: "shared", False: "separate"})}


def from_dict(fields: dict[str, Any], origin: str = "config") -> TransformerConfig:
  """The config `to_dict` wrote (e.g. a work directory's config.json).

  Retired fields of earlier versions are dropped and renamed ones read as their new field,
  so their work directories still load (a field they lack takes its default: what they
  computed); any other unknown field is a ValueError naming it and `origin`.
  """
  known = {f.name for f in dataclasses.fields(TransformerConfig)}
  kept = {k: v for k, v in fields.items() if k not in _RETIRED_FIELDS}
  for old, (new, values) in _RENAMED_FIELDS.items():
    if old in kept and new not in kept and kept[old] in values:
      kept[new] = values[kept.pop(old)]
  unknown = sorted(set(kept) - known)
  if unknown:
    raise ValueError(f"{origin} has unknown config field(s) {unknown}: it was written by "
                     "another version of t2t_jax; remove them or use that version")
  return TransformerConfig(**kept)


def _validate(c: TransformerConfig) -> None:
  for name, hint in typing.get_type_hints(TransformerConfig).items():
    value = getattr(c, name)
    kind, optional = _base_type(hint)
    if value is None and optional:
      continue
    check = FIELD_RULES.get(name, (lambda v: True, ""))[0]
    if not (_type_ok(kind, value) and check(value)):
      raise ValueError(f"{name}={value!r}: accepts {accepts(name)}")
  if c.d_k is None or c.d_v is None:
    if c.d_model % c.num_heads:
      raise ValueError(
          f"d_model={c.d_model} is not divisible by num_heads={c.num_heads}; "
          "set d_k and d_v explicitly or change one of them")
  if c.target_vocab_size is not None and c.embeddings not in OWN_TARGET_VOCABULARY:
    raise ValueError(f"target_vocab_size={c.target_vocab_size} needs a target embedding of its "
                     f"own: embeddings={c.embeddings!r} shares the source's; set embeddings to "
                     f"{' or '.join(repr(e) for e in OWN_TARGET_VOCABULARY)}")
  if c.quantization is not None and c.dtype != "float32":
    raise ValueError(f"quantization={c.quantization!r} runs its products in {c.quantization} and "
                     f"the rest in float32: it cannot be combined with dtype={c.dtype!r}")


# Table 3, in the paper's row order. Blank cells are the base model's values.
TABLE3_ROWS: dict[str, dict[str, Any]] = {
    "A1": dict(num_heads=1, d_k=512, d_v=512),
    "A2": dict(num_heads=4, d_k=128, d_v=128),
    "A3": dict(num_heads=16, d_k=32, d_v=32),
    "A4": dict(num_heads=32, d_k=16, d_v=16),
    "B1": dict(d_k=16),
    "B2": dict(d_k=32),
    "C1": dict(num_layers=2),
    "C2": dict(num_layers=4),
    "C3": dict(num_layers=8),
    "C4": dict(d_model=256, d_k=32, d_v=32),
    "C5": dict(d_model=1024, d_k=128, d_v=128),
    "C6": dict(d_ff=1024),
    "C7": dict(d_ff=4096),
    "D1": dict(dropout_rate=0.0),
    "D2": dict(dropout_rate=0.2),
    "D3": dict(label_smoothing=0.0),
    "D4": dict(label_smoothing=0.2),
    "E": dict(positional_encoding="learned"),
}

# Section 5.1: each language pair's data and shared vocabulary (byte-pair encoding,
# about 37000 tokens, for En-De; 32000 word-pieces for En-Fr).
WMT14_ENDE: dict[str, Any] = dict(dataset="wmt14_translate/de-en", source_lang="en",
                                  target_lang="de", vocab_size=37000)
WMT14_ENFR: dict[str, Any] = dict(dataset="wmt14_translate/fr-en", source_lang="en",
                                  target_lang="fr", vocab_size=32000)

# Big: Table 3's last row; 300k steps (section 5.2); average the last 20 checkpoints
# (section 6.1). P_drop 0.3 on En-De (Table 3).
_BIG = dict(d_model=1024, d_ff=4096, num_heads=16, dropout_rate=0.3,
            num_train_steps=300_000, average_last=20)

PRESETS: dict[str, dict[str, Any]] = {
    "base": dict(WMT14_ENDE),
    **TABLE3_ROWS,
    "big": {**WMT14_ENDE, **_BIG},
    "base_enfr": dict(WMT14_ENFR),
    # Section 6.1: the big En-Fr model used P_drop = 0.1 instead of 0.3.
    "big_enfr": {**WMT14_ENFR, **_BIG, "dropout_rate": 0.1},
    # Section 6.3: 4 layers, d_model 1024, otherwise base; WSJ-only vocabulary 16K;
    # decoding with beam 21, alpha 0.3, max length input + 300.
    "parsing": dict(num_layers=4, d_model=1024, vocab_size=16000, beam_size=21,
                    alpha=0.3, max_decode_extra=300, max_len=1024),
    # Small enough to train on the generated corpus in minutes on a 2-core CPU (each
    # choice measured there: docs/benchmarks.md, "The demo and the compilation cache"). A higher
    # learning rate left the model ignoring the source. Dropout is off: the corpus is
    # deterministic and the run sees each pair about once, so there is nothing to
    # regularise and dropout only slowed learning. 2048-token batches make more updates
    # in the same minutes, as two micro-steps side by side (unrolled), which run faster.
    "demo": dict(dataset="demo", vocab_size=1000, num_layers=3, d_model=128, d_ff=512,
                 num_heads=4, dropout_rate=0.0, max_len=128, max_source_length=64,
                 max_target_length=64, tokens_per_batch=2048, max_tokens_per_device=1024,
                 unroll_micro_steps=2,
                 num_train_steps=1100, warmup_steps=200, learning_rate_scale=0.5,
                 log_every_steps=50, eval_every_steps=550, checkpoint_every_steps=100,
                 checkpoint_every_minutes=None, average_last=3,
                 vocab_sample_sentences=200_000),
    # Multi30k En-De (corpora/multi30k.py), a small real corpus, trained in about an hour on a
    # 2-core CPU (experiments/multi30k.py gives the files): the demo's model, a 6000-piece
    # vocabulary for real text, dropout back on (29000 pairs seen about 10 times each),
    # 4096-token batches, the last 3 of checkpoints 100 steps apart averaged.
    "multi30k": dict(dataset="text", vocab_size=6000, num_layers=3, d_model=128, d_ff=512,
                     num_heads=4, dropout_rate=0.1, max_len=128, max_source_length=64,
                     max_target_length=64, tokens_per_batch=4096, max_tokens_per_device=2048,
                     unroll_micro_steps=2, num_train_steps=1100, warmup_steps=600,
                     learning_rate_scale=1.0, log_every_steps=50, eval_every_steps=550,
                     checkpoint_every_steps=100, checkpoint_every_minutes=None, average_last=3,
                     vocab_sample_sentences=200_000),
}


def get_config(name: str = "base", **overrides: Any) -> TransformerConfig:
  """The named preset with `overrides` applied on top (after the preset's own values)."""
  if name not in PRESETS:
    raise ValueError(f"unknown config {name!r}; choose one of {', '.join(PRESETS)}")
  return TransformerConfig().replace(**{**PRESETS[name], **overrides})


def to_dict(config: TransformerConfig) -> dict[str, Any]:
  return dataclasses.asdict(config)


# --- Parameter counts (Table 3's last column) ---

def count_params(c: TransformerConfig) -> int:
  """Closed-form count of t2t_jax.model.transformer's parameters (equals `init_params`'s, tested).

  Attention projections have no biases (the paper's equations have none) unless
  `attention_bias`; the FFN has b1, b2; every LayerNorm has a scale and a bias;
  `output_bias` adds one per target vocabulary id; `embeddings` says which of the three
  embedding matrices ([vocab_size, d] for the source, [target_vocab, d] for the others)
  are one.
  """
  d, h, dk, dv = c.d_model, c.num_heads, c.key_depth, c.value_depth
  attention = d * h * dk * 2 + d * h * dv + h * dv * d       # W^Q, W^K, W^V, W^O
  if c.attention_bias:
    attention += h * dk * 2 + h * dv + d
  ffn = d * c.d_ff + c.d_ff + c.d_ff * d + d                  # W1, b1, W2, b2
  norm = 2 * d
  encoder_layer = attention + ffn + 2 * norm
  decoder_layer = 2 * attention + ffn + 3 * norm
  source, target = c.vocab_size * d, c.target_vocab * d
  embeddings = {"shared": source, "shared_inputs": source + target,
                "tied_output": source + target, "separate": source + 2 * target}[c.embeddings]
  positions = 2 * c.max_len * d if c.positional_encoding == "learned" else 0
  output_bias = c.target_vocab if c.output_bias else 0
  return (c.num_layers * encoder_layer + c.num_decoder_layers * decoder_layer + embeddings
          + positions + output_bias)
