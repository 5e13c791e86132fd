"""The data pipeline: sources of text pairs, vocabulary, tokenised cache, buckets, batching, packing
(the demo corpus and Multi30k are t2t_jax/corpora/).

`dataset.prepare` puts the pieces together for a run.
"""

# Its public modules (any other module is a part of these).
__all__ = ["dataset", "sources", "textio", "vocab"]
