"""What every export loads: a trained work directory, its vocabulary, and the export libraries.

    cfg, params, spm_path = load_workdir(workdir)     # the averaged params, else the latest
    tokens = vocabulary(spm_path, cfg.vocab_size)     # token string by id
    torch = require("torch")                          # or errors.MissingExtraError: pip install -e '.[export]'

The export libraries (transformers, torch, safetensors, ctranslate2) are imported
only inside the functions that need them, through `require`, so that the core
package runs without them.
"""

from __future__ import annotations

import os
from typing import Any

from t2t_jax import configs
from t2t_jax import errors
from t2t_jax import ids
from t2t_jax.data import vocab
from t2t_jax.export import weights
from t2t_jax.inference import translator
from t2t_jax.runtime import averaging
from t2t_jax.runtime import workdir as workdir_lib

PLACEHOLDER = "<unused{}>"   # vocabulary entry of an id the SentencePiece model lacks
_EXTRAS = f"the export extras are not installed: run  {errors.install('export')}"


def require(module: str) -> Any:
  """The module, or MissingExtraError saying how to install the export extras."""
  try:
    return __import__(module, fromlist=["_"])
  except ImportError as e:
    raise errors.MissingExtraError(f"cannot import {module} ({e}); {_EXTRAS}") from None


def load_workdir(workdir: str | os.PathLike, average: bool = True
                 ) -> tuple[configs.TransformerConfig, Any, str]:
  """(config, host params, SentencePiece model path) of a trained work directory."""
  cfg = workdir_lib.load_config(workdir)
  weights.check_exportable(cfg)
  spm_path = translator.load_tokenizer(workdir).model_path
  params = averaging.load_params(workdir, averaged=average)
  return cfg, params, spm_path


def vocabulary(spm_path: str, vocab_size: int) -> list[str]:
  """Token strings by id: the SentencePiece pieces, then placeholders up to `vocab_size`."""
  tokenizer = vocab.Tokenizer(spm_path)
  pieces = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
  if len(pieces) > vocab_size:
    raise ValueError(f"{spm_path} has {len(pieces)} pieces but the model only "
                     f"vocab_size={vocab_size} ids: the work directory is inconsistent")
  expected = {ids.PAD_ID: "<pad>", ids.EOS_ID: "</s>", ids.UNK_ID: "<unk>"}
  for i, piece in expected.items():
    if pieces[i] != piece:
      raise ValueError(f"{spm_path}: id {i} is {pieces[i]!r}, expected {piece!r} "
                       "(t2t_jax vocabularies have <pad>=0, </s>=1, <unk>=2)")
  taken = set(pieces)
  placeholders = [PLACEHOLDER.format(i) for i in range(len(pieces), vocab_size)]
  if taken & set(placeholders):
    raise ValueError(f"{spm_path} has a piece named like the placeholders {PLACEHOLDER!r}")
  return pieces + placeholders
