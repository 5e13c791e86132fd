"""The conventions every module shares: the token ids, the finite stand-in for log 0, the
batch fields of packed rows, and a decoded row read back as a sentence's ids (`strip_eos`).

0 is padding (and the decoder's start input: targets are shifted right with 0
in front), 1 ends a sentence, 2 is an unknown piece. There is no BOS.
"""

from typing import Iterable

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
# A lexical shortlist's padding entry (data/shortlist.py): no id, never a token.
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
