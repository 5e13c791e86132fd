"""The faster kernels the model and the searches run, each a swap-in for a reference that sits
where a reader meets it (attention in model/attention.py, dropout in model/layers.py, the
output projection and the loss in train/step.py and kernels/logits.py, top-k as
`jax.lax.top_k`), and the one place (`choice`) that picks among them for the platform a
program is built for and hands them to the model (model/plugins.py) and the search.

`int8` and `bfloat16` (decoding with int8 or bfloat16 products) are loaded only for a model
that asks for them.
"""

# Its public modules (any other module is a part of these).
__all__ = ["choice", "int8", "logits"]
