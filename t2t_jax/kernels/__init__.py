"""The faster kernels the model and the searches run, each a swap-in for a reference that sits
where a reader meets it (attention in model/attention.py, dropout in model/layers.py, the
output projection and the loss in train/step.py and kernels/logits.py, top-k as
`jax.lax.top_k`), and the one place (`choice`) that picks among them for the platform a
program is built for and hands them to the model (model/plugins.py) and the search.

Decoding with int8 or bfloat16 products is t2t_jax/quantization/, loaded only for a model
that asks for it.
"""

# Its public modules (any other module is a part of these).
__all__ = ["choice", "logits"]
