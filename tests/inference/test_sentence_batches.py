"""Many sentences into decoding batches: input order kept, batch shapes from a few buckets."""

import numpy as np
import pytest

import tiny
from t2t_jax.decoding import ensemble
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import search
from t2t_jax.ids import EOS_ID, strip_eos
from t2t_jax.inference import sentence_batches

TINY = tiny.TINY


def test_decode_ids_restores_input_order():
  # Distinct lengths sort the same whatever the input order: the same batches of
  # 4 (the last padded with a filler row).
  params = tiny.params()
  sources = tiny.sources(1, [6, 2, 0, 4, 1, 5, 3])
  order = np.random.default_rng(0).permutation(len(sources))
  outputs = sentence_batches.decode_ids(TINY, params, sources)
  shuffled = sentence_batches.decode_ids(TINY, params, [sources[i] for i in order])
  assert shuffled == [outputs[i] for i in order]
  # Two batches decoding at once (the default) give what one at a time gives.
  assert sentence_batches.decode_ids(TINY, params, sources, in_flight=1) == outputs
  # Each sentence decoded on its own gives the same output.
  single = tiny.rows([sources[2], sources[0], sources[1], sources[3]])
  tokens, _ = batch_decoder.decode_batch([ensemble.Member(TINY.model, params)], single,
                                    search.Search.from_config(TINY))
  assert [strip_eos(t) for t in tokens[:, 0]] == [outputs[2], outputs[0], outputs[1], outputs[3]]
  assert all(len(out) <= len(src) + 1 + TINY.max_decode_extra
             for src, out in zip(sources, outputs))
  with pytest.raises(ValueError, match="truncate"):
    sentence_batches.decode_ids(TINY, params, [[5] * TINY.max_len])


def test_source_rows_pad_to_the_bucket_of_the_longest_source():
  # 43 ids + EOS fit the bucket 48 (not the power of two 64); 3 rows round up to 4.
  rows = sentence_batches.source_rows([[5] * 43, [6] * 7, []], batch_size=64, max_len=128)
  assert rows.shape == (4, 48) and rows.dtype == np.int32
  assert rows[0, 42:45].tolist() == [5, EOS_ID, 0]
  assert rows[1, :9].tolist() == [6] * 7 + [EOS_ID, 0]
  assert rows[2, 0] == EOS_ID and not rows[3].any()          # the filler row is all padding
  assert sentence_batches.source_rows([[5] * 3], batch_size=64, max_len=128).shape == (1, 8)
  assert sentence_batches.source_rows([[5] * 90], batch_size=64, max_len=96).shape == (1, 96)
  assert sentence_batches.source_rows([[5]] * 17, batch_size=24, max_len=128).shape[0] == 24


def test_by_length_sorts_cuts_and_returns_every_index():
  lengths = [5, 1, 3, 9, 2]
  seen = []

  def decode(batch):
    seen.append(list(batch))
    return [f"out{i}" for i in batch]

  found = sentence_batches.by_length(decode, lengths, batch_size=2, in_flight=1,
                                     indices=[0, 1, 2, 3])
  assert found == {i: f"out{i}" for i in (0, 1, 2, 3)}
  assert sorted(map(sorted, seen)) == [[0, 3], [1, 2]]     # by length: [1, 2], then [0, 3]
