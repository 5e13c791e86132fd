"""Ids in, ids out: beam search, greedy, sampling, ensembles, alignment, the search settings,
the compiled programs that decode one batch, and several batches kept in flight.

Text in, text out is one level up, in `t2t_jax.inference`.
"""

# Its public modules (any other module is a part of these).
__all__ = ["alignment", "batch_decoder", "beam_search", "ensemble", "in_flight", "search",
           "uncached"]
