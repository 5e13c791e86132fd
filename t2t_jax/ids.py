"""The conventions every module shares: the token ids, the finite stand-in for log 0, the
batch fields of packed rows, the one series of padded lengths, and a decoded row read back
as a sentence's ids (`strip_eos`). Pure Python: no JAX, no vocabulary.

0 is padding (and the decoder's start input: targets are shifted right with 0
in front), 1 ends a sentence, 2 is an unknown piece. There is no BOS.
"""

from typing import Iterable

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
# A lexical shortlist's padding entry (inference/shortlist.py): no id, never a token.
FILLER = -1

# The finite stand-in for log 0: a masked attention logit's bias and an impossible
# token's log-probability. exp(-1e9 - max) underflows to exactly 0 in float32,
# and sums of it (masks added together, scores of impossible hypotheses) stay
# finite, so no softmax, sum or division of it makes NaN.
NEG_INF = -1e9

# The batch fields packed rows add (data/packing.py writes them, the train step reads them).
SEGMENT_KEYS = ("inputs_segments", "targets_segments")


def strip_eos(tokens: Iterable[int]) -> list[int]:
  """The ids before the first EOS (or padding): a decoded row as a sentence's ids."""
  out = []
  for token in tokens:
    if token in (EOS_ID, PAD_ID):
      break
    out.append(int(token))
  return out


# The one series of padded lengths (and decoding batch sizes): training batches,
# evaluation batches and decoding batches are all padded to a member of it, so the set
# of shapes, and of compilations, stays small.
# Powers of two and the midpoints between them (x1.5 then x4/3).
BUCKET_LENGTHS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def bucket_length(n: int, minimum: int = 8) -> int:
  """The smallest member of the series (>= `minimum`) that is >= n; it goes on past 1024."""
  size = minimum
  while size < n:
    size = size * 3 // 2 if size & (size - 1) == 0 else size * 4 // 3
  return size


def bucket_lengths(max_length: int) -> list[int]:
  """The series below `max_length`, then `max_length` itself as the last bucket."""
  buckets = [b for b in BUCKET_LENGTHS if b < max_length]
  return buckets + [max_length]
