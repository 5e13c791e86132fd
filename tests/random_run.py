"""A work directory as training leaves it, with a tiny random model (config.json,
vocab/spm.model, two checkpoints and their average), and the awkward lines the translation
tests feed it."""

import dataclasses
import json
import pathlib

import jax
import numpy as np

from t2t_jax import configs
from t2t_jax.corpora import demo
from t2t_jax.data import vocab
from t2t_jax.ids import EOS_ID
from t2t_jax.model import transformer
from t2t_jax.runtime import averaging
from t2t_jax.runtime import checkpoint

LONG = " ".join(["the old man saw the small dog"] * 12)

LINES = [
    "the dog sleeps",
    "",
    "yesterday the old man saw the small dog 🐶🎉",
    "\x00\x07 control \x1b[31m characters\r inside \x0b\u2028 a line",
    "日本語のテキスト, עברית, Ελληνικά",
    "   ",
    LONG,
    "a",
    "the children opened the door of the house because it was cold",
]


def make(root: pathlib.Path):
  """(root, the first checkpoint's params, the second's), saved under `root`."""
  pairs = demo.generate(300, seed=0, max_words=12)
  tokenizer = vocab.build_or_load(96, str(root / "vocab"), lambda: pairs)
  cfg = configs.get_config("demo", vocab_size=96, num_layers=1, d_model=16, d_ff=32,
                           num_heads=2, max_len=64, max_decode_extra=4, beam_size=2,
                           decode_batch_size=4)
  assert tokenizer.vocab_size <= cfg.vocab_size
  (root / "config.json").write_text(json.dumps(dataclasses.asdict(cfg)))
  first = transformer.init_params(cfg.model, jax.random.key(0))
  # A random model prefers the empty translation (its distributions are flat, or
  # peaked on whatever token); peaked ones (logits x10 through the shared
  # embedding) with EOS in the middle of the pack (logit 0) give real outputs.
  embedding = 10.0 * np.asarray(first["embedding"]["embedding"])
  embedding[EOS_ID] = 0.0
  first["embedding"]["embedding"] = embedding
  second = jax.tree.map(lambda x: 0.8 * x, first)
  with checkpoint.Checkpointer(root, cfg, async_save=False) as ckpt:
    for step, params in ((1, first), (2, second)):
      ckpt.maybe_save(step, {"params": params}, force=True)
  averaging.average_checkpoints(root, last=2)
  return root, first, second
