"""What decoding outputs, checked and read back, for the tests: token rows, n-best lines.

The package only writes the n-best and alignment formats (`streaming.format_nbest`,
`alignment.format_pairs`); the tests parse what it wrote to check it.
"""

from typing import Optional

import numpy as np

from t2t_jax.ids import EOS_ID

Pairs = list[tuple[int, int]]


def check_well_formed(tokens, max_lens):
  """Each hypothesis: real tokens, at most one EOS and only last, then padding; within its limit."""
  tokens = np.asarray(tokens)
  per_sentence = tokens.size // tokens.shape[-1] // len(max_lens)
  for row, limit in zip(tokens.reshape(-1, tokens.shape[-1]), np.repeat(max_lens, per_sentence)):
    used = int(np.count_nonzero(row))
    assert np.all(row[used:] == 0), row
    assert EOS_ID not in row[:used - 1], row
    assert 1 <= used <= limit, (row, limit)


def parse_pairs(line: str) -> Pairs:
  """"0-0 1-2" -> [(0, 0), (1, 2)]: the inverse of `alignment.format_pairs`."""
  pairs = []
  for item in line.split():
    i, sep, j = item.partition("-")
    if not sep or not i.isdigit() or not j.isdigit():
      raise ValueError(f"{item!r} is not an alignment pair like 3-4")
    pairs.append((int(i), int(j)))
  return pairs


def parse_nbest(line: str) -> tuple[int, str, float, Optional[Pairs]]:
  """One n-best line back to (index, hypothesis, score, alignment or None)."""
  fields = line.rstrip("\n").split("\t")
  if len(fields) not in (3, 4) or not fields[0].isdigit():
    raise ValueError(f"not an n-best line (index TAB hypothesis TAB score [TAB alignment]): "
                     f"{line!r}")
  pairs = parse_pairs(fields[3]) if len(fields) == 4 else None
  return int(fields[0]), fields[1], float(fields[2]), pairs
