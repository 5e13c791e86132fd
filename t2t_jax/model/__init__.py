"""The Transformer itself: layers, attention, dropout, encoder/decoder, incremental decoding state.

The names a user of the model needs are re-exported here:
`from t2t_jax import model; model.Transformer(cfg)`.
"""

from t2t_jax.model.layers import causal_mask as causal_mask
from t2t_jax.model.layers import padding_mask as padding_mask
from t2t_jax.model.layers import scaled_dot_product_attention as scaled_dot_product_attention
from t2t_jax.model.layers import sinusoidal_positions as sinusoidal_positions
from t2t_jax.model.transformer import decode_step as decode_step
from t2t_jax.model.transformer import init_cache as init_cache
from t2t_jax.model.transformer import init_params as init_params
from t2t_jax.model.transformer import Transformer as Transformer

__all__ = ["Transformer", "causal_mask", "decode_step", "init_cache", "init_params",
           "padding_mask", "scaled_dot_product_attention", "sinusoidal_positions"]
