"""A test set translated and scored: text <-> ids as every translation path reads and writes
them (`text`: blank lines, cuts, unknown ids; the one-model translation of a list of lines)
and the three signed BLEU scores (`bleu`). Training scores its test set with these; the
translator (t2t_jax.inference) shares `text`.
"""

# Its public modules (any other module is a part of these).
__all__ = ["bleu", "text"]
