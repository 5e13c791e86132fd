"""Ids in, ids out: beam search (`beam_search`, whole, over any step function), the models bound
to it as compiled programs (`batch_decoder`), many sentences sorted into batches
(`sentence_batches`); the uncached reference beside them.

Text in, text out is one level up: `t2t_jax.inference` (sampling and word alignments with it)
and `t2t_jax.evaluation`.
"""

# Its public modules (any other module is a part of these).
__all__ = ["batch_decoder", "beam_search", "sentence_batches", "uncached"]
