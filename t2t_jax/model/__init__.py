"""The Transformer itself: layers, attention, dropout, encoder/decoder, incremental decoding state.

Its public modules, and the three functions a program that only runs the model needs:
`from t2t_jax import model; params = model.init_params(cfg, key)` (then `init_cache`,
`decode_step`). The module itself is `transformer.Transformer`.
"""

from t2t_jax.model.transformer import decode_step as decode_step
from t2t_jax.model.transformer import init_cache as init_cache
from t2t_jax.model.transformer import init_params as init_params

__all__ = ["attention", "decode_step", "init_cache", "init_params", "layers", "plugins", "transformer"]
