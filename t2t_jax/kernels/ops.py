"""The one place that chooses a kernel: each job the model and the searches do, run by the
kernel chosen here for the platform the program is built for.

The model reads as the paper: `attention(q, k, v, mask)`, `dropout(x, key, rate)`,
`project_logits(hidden, embedding)`; the searches pick with `top_k`. Which kernel
runs each, and why, is decided below and nowhere else; each kernel lives beside
its reference in its own module of this package (tests hold them equal).

| job | kernels (reference first) | chosen by |
|---|---|---|
| output projection | `logits.projection`, `logits.vocab_major_projection` | the caller's `layout`: `logits_layout` (one model's searches: vocabulary-major) |
"""

from __future__ import annotations

import jax

from t2t_jax.kernels import logits as logits_lib

Array = jax.Array


# ----------------------------------------------------------------------------- logits


def logits_layout(models: int) -> str:
  """The layout a search over `models` models asks its step function for.

  One model's logits go to the search as they are, vocabulary-major (read in place,
  decoding/next_token.py); an ensemble averages row-major log-probabilities.
  """
  return "vocab_major" if models == 1 else "row_major"


def project_logits(hidden: Array, kernel: Array, layout: str = "row_major") -> logits_lib.Logits:
  """The output projection of hidden [..., d_model] by the pre-softmax weights [vocab, d_model].

  "row_major": logits [..., vocab]; "vocab_major" (hidden [rows, d_model] only):
  `logits.VocabMajor` [vocab, rows]. Operands in hidden's dtype, logits float32.
  """
  if layout not in logits_lib.LAYOUTS:
    raise ValueError(f"logits layout {layout!r} is not one of {logits_lib.LAYOUTS}")
  if layout == "vocab_major":
    return logits_lib.vocab_major_projection(hidden, kernel)
  return logits_lib.projection(hidden, kernel)
