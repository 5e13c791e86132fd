"""t2t_jax: the Transformer of "Attention Is All You Need" as pure JAX/Flax pieces.

Import the submodule you need (`t2t_jax.model.layers`, `t2t_jax.model.transformer`, ...); this
package file imports nothing heavy so that `import t2t_jax.model.layers` stays light.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "configs", "ids", "accelerators", "cli", "data", "decoding", "export",
           "inference", "model", "recipes", "runtime", "serve", "train"]
