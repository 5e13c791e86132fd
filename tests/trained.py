"""A small model trained briefly on the demo corpus, saved as training leaves a work directory.

Tests that need a model whose translations mean something (beam search that
agrees with another engine, n-best lists, alignments) share it through the
`trained_workdir` fixture in conftest.py: config.json, vocab/spm.model and one
checkpoint, made in about 20 s on one CPU device. The corpus sentences are short
(at most 9 words) so that a single batch shape covers them.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
import numpy as np

from t2t_jax import configs
from t2t_jax.corpora import demo
from t2t_jax.data import vocab
from t2t_jax.runtime import checkpoint
from t2t_jax.train import step as step_lib

LENGTH = 20          # pieces per side, EOS included; longer pairs are left out
ROWS = 64            # sentence pairs per update
STEPS = 300


def write_text_corpus(directory: pathlib.Path, num_pairs: int, num_dev: int,
                      num_test: int) -> dict[str, str]:
  """Short demo pairs (3-5 words) as {dev,test,train}.{en,de}; returns the `*_files` config fields."""
  pairs = demo.generate(num_pairs, seed=0, min_words=3, max_words=5)
  chunks = {"dev": pairs[:num_dev], "test": pairs[num_dev:num_dev + num_test],
            "train": pairs[num_dev + num_test:]}
  files = {}
  for split, chunk in chunks.items():
    for side, lang in enumerate(("en", "de")):
      (directory / f"{split}.{lang}").write_text("".join(pair[side] + "\n" for pair in chunk))
    files[f"{split}_files"] = f"{directory}/{split}.en,{directory}/{split}.de"
  return files


def config() -> configs.TransformerConfig:
  return configs.get_config(
      "demo", vocab_size=300, num_layers=2, d_model=64, d_ff=128, num_heads=4,
      max_len=64, warmup_steps=100, learning_rate_scale=1.0, max_decode_extra=10,
      beam_size=4, decode_batch_size=16, checkpoint_every_steps=STEPS)


def held_out_sources(count: int) -> list[str]:
  """English sentences from another seed than the training pairs'."""
  return [en for en, _ in demo.generate(count, seed=99, max_words=9)]


def _batches(tokenizer: vocab.Tokenizer, pairs, rng: np.random.Generator):
  ids = [(tokenizer.encode(en), tokenizer.encode(de)) for en, de in pairs]
  ids = [(s, t) for s, t in ids if len(s) <= LENGTH and len(t) <= LENGTH]
  while True:
    inputs = np.zeros((1, 1, ROWS, LENGTH), np.int32)   # [devices, accum, rows, length]
    targets = np.zeros_like(inputs)
    for row, i in enumerate(rng.choice(len(ids), ROWS, replace=False)):
      source, target = ids[i]
      inputs[0, 0, row, :len(source)] = source
      targets[0, 0, row, :len(target)] = target
    yield {"inputs": inputs, "targets": targets}


def make(root: pathlib.Path, num_steps: int = STEPS) -> pathlib.Path:
  """Trains into `root` and returns it; prints the last training accuracy."""
  cfg = config()
  pairs = demo.generate(4000, seed=0, max_words=9)
  tokenizer = vocab.build_or_load(cfg.vocab_size, str(root / "vocab"), lambda: pairs)
  (root / "config.json").write_text(json.dumps(dataclasses.asdict(cfg)))
  built = step_lib.build(cfg, devices=jax.local_devices()[:1], parallelism="pmap")
  mapped = built.mapped
  state = mapped.put_state(built.init_state(jax.random.key(0)))
  batches = _batches(tokenizer, pairs, np.random.default_rng(0))
  key = jax.random.key(1)
  for _ in range(num_steps):
    state, metrics = mapped.train_step(state, mapped.put_batch(next(batches)), key)
  print(f"trained {num_steps} steps: accuracy {float(metrics['accuracy'][0]):.3f}")
  params = jax.device_get(mapped.get(state.params))
  with checkpoint.Checkpointer(root, cfg, async_save=False) as ckpt:
    ckpt.maybe_save(num_steps, {"params": params}, force=True)
  return root
