"""The figures of "Attention Is All You Need" (Vaswani et al., NIPS 2017) that the code uses.

One home for the paper's numbers, each with the table or section it comes
from: what the experiments print beside ours (Table 2's test BLEU, Table 3's
dev perplexity, BLEU and parameter counts, section 6.3's parsing F1, section
5.2's hardware and time) and the settings the presets must hold (sections 5
and 6), which tests/test_configs.py checks preset by preset.

These are the paper's statements, written out here, not derived from
configs.py: a preset that drifts from the paper fails its test.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

# --- Table 2: newstest2014 BLEU (tokenised, compound splitting), by preset ---
TEST_BLEU: dict[str, float] = {
    "base": 27.3, "big": 28.4,            # EN-DE column
    "base_enfr": 38.1, "big_enfr": 41.8,  # EN-FR column
}

# --- Section 5.2: hardware and schedule (one machine with 8 NVIDIA P100 GPUs) ---
HARDWARE = "one machine with 8 NVIDIA P100"
TRAINING_TIME: dict[str, str] = {
    "base": "0.4 s/step, 100k steps, 12 hours",
    "big": "1.0 s/step, 300k steps, 3.5 days",
}


# --- Table 3: variations on the base model (En-De newstest2013 dev, beam search,
# no checkpoint averaging). None is a blank cell: the same as base. ---
class Table3Row(NamedTuple):
  num_layers: Optional[int]          # N
  d_model: Optional[int]
  d_ff: Optional[int]
  num_heads: Optional[int]           # h
  d_k: Optional[int]
  d_v: Optional[int]
  dropout_rate: Optional[float]      # P_drop
  label_smoothing: Optional[float]   # eps_ls
  num_train_steps: Optional[int]     # train steps
  perplexity: float                  # PPL (dev), per word-piece
  bleu: float                        # BLEU (dev)
  params_m: Optional[float]          # params x 10^6; None where the paper leaves it blank
  positional_encoding: Optional[str] = None   # row E: "learned" instead of sinusoids


_ = None
TABLE3: dict[str, Table3Row] = {
    #            N  d_model d_ff   h  d_k  d_v  P_drop eps_ls steps   PPL   BLEU  params
    "base": Table3Row(6, 512, 2048, 8, 64, 64, 0.1, 0.1, 100_000, 4.92, 25.8, 65),
    "A1": Table3Row(_, _, _, 1, 512, 512, _, _, _, 5.29, 24.9, _),
    "A2": Table3Row(_, _, _, 4, 128, 128, _, _, _, 5.00, 25.5, _),
    "A3": Table3Row(_, _, _, 16, 32, 32, _, _, _, 4.91, 25.8, _),
    "A4": Table3Row(_, _, _, 32, 16, 16, _, _, _, 5.01, 25.4, _),
    "B1": Table3Row(_, _, _, _, 16, _, _, _, _, 5.16, 25.1, 58),
    "B2": Table3Row(_, _, _, _, 32, _, _, _, _, 5.01, 25.4, 60),
    "C1": Table3Row(2, _, _, _, _, _, _, _, _, 6.11, 23.7, 36),
    "C2": Table3Row(4, _, _, _, _, _, _, _, _, 5.19, 25.3, 50),
    "C3": Table3Row(8, _, _, _, _, _, _, _, _, 4.88, 25.5, 80),
    "C4": Table3Row(_, 256, _, _, 32, 32, _, _, _, 5.75, 24.5, 28),
    "C5": Table3Row(_, 1024, _, _, 128, 128, _, _, _, 4.66, 26.0, 168),
    "C6": Table3Row(_, _, 1024, _, _, _, _, _, _, 5.12, 25.4, 53),
    "C7": Table3Row(_, _, 4096, _, _, _, _, _, _, 4.75, 26.2, 90),
    "D1": Table3Row(_, _, _, _, _, _, 0.0, _, _, 5.77, 24.6, _),
    "D2": Table3Row(_, _, _, _, _, _, 0.2, _, _, 4.95, 25.5, _),
    "D3": Table3Row(_, _, _, _, _, _, _, 0.0, _, 4.67, 25.3, _),
    "D4": Table3Row(_, _, _, _, _, _, _, 0.2, _, 5.47, 25.7, _),
    "E": Table3Row(_, _, _, _, _, _, _, _, _, 4.92, 25.7, _, "learned"),
    "big": Table3Row(6, 1024, 4096, 16, _, _, 0.3, _, 300_000, 4.33, 26.4, 213),
}
del _

# Table 3's dev figures and parameter column, as the recipes print them.
DEV: dict[str, tuple[float, float]] = {name: (r.perplexity, r.bleu) for name, r in TABLE3.items()}
PARAMS_M: dict[str, float] = {name: r.params_m for name, r in TABLE3.items()
                              if r.params_m is not None}

_MODEL_COLUMNS = ("num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v", "dropout_rate",
                  "label_smoothing", "num_train_steps")


def table3_settings(row: str) -> dict[str, Any]:
  """Row `row`'s settings in config field names, blank cells filled from base.

  d_k and d_v left blank by a row that changes d_model or h are d_model / h
  (section 3.2.2); "big" leaves them blank too.
  """
  base, own = TABLE3["base"], TABLE3[row]
  settings = {c: getattr(own, c) if getattr(own, c) is not None else getattr(base, c)
              for c in _MODEL_COLUMNS}
  for depth in ("d_k", "d_v"):
    if getattr(own, depth) is None and (own.d_model or own.num_heads):
      settings[depth] = settings["d_model"] // settings["num_heads"]
  settings["positional_encoding"] = own.positional_encoding or "sinusoidal"
  return settings


# --- Sections 5 and 6: the settings every WMT14 model shares ---
# Section 5.1: byte-pair encoding with a shared vocabulary of about 37000 tokens
# (En-De), 32000 word-pieces (En-Fr); batches of about 25000 source and 25000
# target tokens.
VOCAB_SIZE = {"de": 37000, "fr": 32000}
TOKENS_PER_BATCH = 25000
# Section 5.3: Adam with beta1 0.9, beta2 0.98, epsilon 1e-9; 4000 warmup steps.
OPTIMIZER = dict(adam_b1=0.9, adam_b2=0.98, adam_eps=1e-9, warmup_steps=4000)
# Section 5.4: label smoothing 0.1.
LABEL_SMOOTHING = 0.1
# Section 6.1: beam 4, length penalty alpha 0.6, max output length input + 50;
# checkpoints written at 10-minute intervals, the last 5 averaged (big: 20).
DECODING = dict(beam_size=4, alpha=0.6, max_decode_extra=50)
CHECKPOINT_MINUTES = 10
AVERAGE_LAST = {"base": 5, "big": 20}
# Section 5.4 / 6.1: P_drop 0.1 (base), 0.3 (big En-De), 0.1 (big En-Fr).
DROPOUT = {"base": 0.1, "big": 0.3, "base_enfr": 0.1, "big_enfr": 0.1}


def settings(preset: str) -> dict[str, Any]:
  """The config values the paper states for a WMT14 preset (base, big, base_enfr, big_enfr)."""
  size = preset.split("_")[0]
  target = "fr" if preset.endswith("_enfr") else "de"
  return {
      **table3_settings(size), **OPTIMIZER, **DECODING,
      "label_smoothing": LABEL_SMOOTHING, "dropout_rate": DROPOUT[preset],
      "vocab_size": VOCAB_SIZE[target], "target_lang": target,
      "tokens_per_batch": TOKENS_PER_BATCH, "checkpoint_every_minutes": CHECKPOINT_MINUTES,
      "average_last": AVERAGE_LAST[size],
  }


# --- Section 6.3 (Table 4): English constituency parsing, WSJ section 23 F1 ---
PARSING_F1 = {"wsj_only": 91.3, "semi_supervised": 92.7}
# 4 layers, d_model 1024, otherwise base; WSJ-only vocabulary of 16K tokens;
# beam 21, alpha 0.3, max output length input + 300.
PARSING = dict(num_layers=4, d_model=1024, vocab_size=16000, beam_size=21, alpha=0.3,
               max_decode_extra=300)
