"""Ids in, ids out: beam search (`beam_search`, whole, over any step function), the models bound
to it as compiled programs (`batch_decoder`), many sentences sorted into batches
(`sentence_batches`); sampling, word alignments and the uncached reference beside them.

Text in, text out is one level up, in `t2t_jax.inference`.
"""

# Its public modules (any other module is a part of these).
__all__ = ["alignment", "batch_decoder", "beam_search", "sampling", "sentence_batches",
           "uncached"]
