"""Ids in, ids out: beam search, greedy, sampling, ensembles, alignment and the batch driver.

Text in, text out is one level up, in `t2t_jax.inference`.
"""
