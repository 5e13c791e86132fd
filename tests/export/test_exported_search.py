"""export/exported_search.py: the exported models decode under our per-sentence output limits, grouped
by limit into batches (the engines at work: test_huggingface.py, test_ctranslate2.py)."""

from t2t_jax import configs
from t2t_jax.export import exported_search

CFG = configs.get_config("demo", max_len=32, max_decode_extra=4)


def test_output_limits_are_our_rule_from_source_lengths():
  sources = [[5, 6, 1], [1], [7] * 20 + [1], [7] * 31 + [1]]   # EOS included
  # ceil(1.0 x n) + 4, at most the model's 32 positions.
  assert exported_search.output_limits(CFG, sources) == [7, 5, 25, 32]
  assert exported_search.output_limits(CFG, [[5, 6, 1]], max_decode_extra=0, max_len_a=2.0) == [6]


def test_batches_hold_one_limit_and_at_most_batch_size_sentences():
  limits = [7, 5, 7, 7, 5]
  groups = list(exported_search.batches(limits, 2))
  assert groups == [(5, [1, 4]), (7, [0, 2]), (7, [3])]
  assert sorted(i for _, group in groups for i in group) == list(range(len(limits)))
