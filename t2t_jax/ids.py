"""The token-id convention shared by every module: one home for these numbers, and a
decoded row read back as a sentence's ids (`strip_eos`).

0 is padding (and the decoder's start input: targets are shifted right with 0
in front), 1 ends a sentence, 2 is an unknown piece. There is no BOS.
"""

from typing import Iterable

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
# A lexical shortlist's padding entry (data/shortlist.py): no id, never a token.
FILLER = -1


def strip_eos(tokens: Iterable[int]) -> list[int]:
  """The ids before the first EOS (or padding): a decoded row as a sentence's ids."""
  out = []
  for token in tokens:
    if token in (EOS_ID, PAD_ID):
      break
    out.append(int(token))
  return out
