"""The one series of padded lengths (and decoding batch sizes): 8, 12, 16, 24, 32, 48, ...

Training batches, evaluation batches and decoding batches are all padded to a
member of this series, so the set of shapes, and of compilations, stays small.
Pure Python: no JAX, no vocabulary.
"""

from __future__ import annotations

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
