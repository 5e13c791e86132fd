"""The data pipeline: sources of text pairs, vocabulary, tokenised cache, buckets, batching, packing, the demo corpus.

`dataset.prepare` puts the pieces together for a run.
"""

# Its public modules (any other module is a part of these).
__all__ = ["dataset", "demo", "multi30k", "shortlist", "sources", "textio",
           "vocab"]
