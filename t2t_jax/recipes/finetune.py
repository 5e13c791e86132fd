"""Fine-tuning: a new run that starts from another run's parameters and vocabulary.

As fairseq's `--finetune-from-model` and Marian's `--pretrained-model`: the new
run takes the parent's (averaged, if averaged) parameters and its vocabulary,
and starts a fresh optimiser and learning-rate schedule at step 0 on whatever
data its config names. The model must have the parent's shapes and the
vocabulary must be the parent's; anything else is refused in one line.

    cfg = finetune.config(parent, data_fields_and_overrides)
    params = finetune.start(cfg, parent, workdir)   # checks, copies the vocabulary
    experiment.run(cfg, workdir, init_params=params)
"""

from __future__ import annotations

import logging
import os
import pathlib
from typing import Any

from t2t_jax import configs
from t2t_jax.data import vocab
from t2t_jax.runtime import averaging
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)

# The fields that decide the parameters' shapes and how text becomes ids.
SHAPE_FIELDS = ("vocab_size", "vocab_type", "num_layers", "d_model", "d_ff", "num_heads",
                "key_depth", "value_depth", "share_embeddings", "positional_encoding")


def _shape(cfg: configs.TransformerConfig) -> dict[str, Any]:
  shape = {name: getattr(cfg, name) for name in SHAPE_FIELDS}
  if cfg.positional_encoding == "learned":
    shape["max_len"] = cfg.max_len  # the size of the learned position table
  return shape


def config(parent: str | os.PathLike, overrides: dict[str, Any]) -> configs.TransformerConfig:
  """The parent run's config with `overrides` (data files, steps, learning rate...) on top."""
  return workdir_lib.load_config(parent).replace(**overrides)


def check(cfg: configs.TransformerConfig, parent: str | os.PathLike) -> None:
  """ValueError naming the differences if `cfg`'s model or vocabulary is not the parent's."""
  theirs, ours = _shape(workdir_lib.load_config(parent)), _shape(cfg)
  changed = [k for k in ours if theirs.get(k) != ours[k]]
  if changed:
    diffs = ", ".join(f"{k}: {theirs.get(k)!r} -> {ours[k]!r}" for k in changed)
    raise ValueError(f"cannot fine-tune from {parent}: the model or vocabulary differs "
                     f"({diffs}); keep the parent's settings for these fields")


def start(cfg: configs.TransformerConfig, parent: str | os.PathLike,
          workdir: str | os.PathLike) -> Any:
  """Checks `cfg` against the parent, gives `workdir` its vocabulary, returns its params.

  The params are the parent's averaged ones when it has them, else its latest
  checkpoint's (FileNotFoundError when it has neither).
  """
  parent = pathlib.Path(parent)
  check(cfg, parent)
  vocab.adopt(str(parent / "vocab"), str(pathlib.Path(workdir) / "vocab"))
  params = averaging.load_params(parent, averaged=True)
  log.info("Fine-tuning from %s", parent)
  return params
