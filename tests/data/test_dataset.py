"""The prepared dataset: reading corpora, the token cache, length buckets and device batches."""

import dataclasses
import functools
import gc
import json
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest

from t2t_jax import configs
from t2t_jax.data import batching
from t2t_jax.data import dataset
from t2t_jax.corpora import demo
from t2t_jax.data import tokenized


def _write(path, lines):
  path.write_text("\n".join(lines) + "\n", encoding="utf-8")
  return str(path)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
  directory = tmp_path_factory.mktemp("corpus")
  pairs = demo.generate(1600, seed=5)
  train, dev, test = pairs[:1400], pairs[1400:1500], pairs[1500:]
  # Make the training data dirty: an empty pair and an over-long one must be dropped.
  train = train + [("", "Leer."), ("long " * 70, "lang " * 70)]
  for name, split in (("train", train), ("dev", dev), ("test", test)):
    _write(directory / f"{name}.en", [p[0] for p in split])
    _write(directory / f"{name}.de", [p[1] for p in split])
  return directory


def _config(corpus_dir, **overrides):
  files = {s: f"{corpus_dir}/{s}.en,{corpus_dir}/{s}.de" for s in ("train", "dev", "test")}
  settings = dict(dataset="text", train_files=files["train"], dev_files=files["dev"],
                  test_files=files["test"], vocab_size=300, max_source_length=48,
                  max_target_length=48, tokens_per_batch=480, max_tokens_per_device=480,
                  max_len=128, seed=1)
  settings.update(overrides)
  return configs.get_config("base", **settings)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("work"))


@pytest.fixture(scope="module")
def ds(corpus_dir, workdir):
  """One pair per row, in length buckets."""
  return dataset.prepare(_config(corpus_dir, packing=False), workdir)


@pytest.fixture(scope="module")
def packed(corpus_dir, workdir):
  """Several pairs per row (the default), in rows of 64 and 32; the same vocabulary."""
  return dataset.prepare(_config(corpus_dir, max_source_length=64, max_target_length=64),
                      workdir)


def _rows(batch):
  """The real (non-filler) rows of a batch in global order, as (source, target) tuples."""
  src = batch["inputs"].reshape(-1, batch["inputs"].shape[-1])
  tgt = batch["targets"].reshape(-1, batch["targets"].shape[-1])
  keep = (src != 0).any(axis=1)
  assert np.array_equal(keep, (tgt != 0).any(axis=1))  # filler rows are zero on both sides
  return [(tuple(s[s != 0]), tuple(t[t != 0])) for s, t in zip(src[keep], tgt[keep])]


def _pairs(split):
  return [(tuple(split.src_ids[split.src_offsets[i]:split.src_offsets[i + 1]]),
           tuple(split.tgt_ids[split.tgt_offsets[i]:split.tgt_offsets[i + 1]]))
          for i in range(len(split))]


def test_dropping_and_counts(ds):
  assert ds.counts["empty"] == 1 and ds.counts["too_long"] >= 1
  assert ds.counts["kept"] == len(ds.train) == 1402 - ds.counts["empty"] - ds.counts["too_long"]
  assert ds.train.src_lengths.max() <= 48 and ds.train.tgt_lengths.max() <= 48
  # Dev and test keep every line, raw text included.
  assert len(ds.dev) == len(ds.dev_sources()) == len(ds.dev_references()) == 100
  assert len(ds.test) == len(ds.test_references()) == 100
  ids = ds.test.tgt_ids[ds.test.tgt_offsets[3]:ds.test.tgt_offsets[4]]
  assert ds.tokenizer.decode(ids) == ds.test_references()[3]
  stats = ds.stats
  assert 0.3 < stats["padding_efficiency_source"] <= 1
  assert stats["target_tokens_per_batch"]["max"] <= 480


def test_buckets_budget_and_shapes(ds):
  assert ds.buckets == [8, 12, 16, 24, 32, 48]
  src, tgt = ds.train.src_lengths, ds.train.tgt_lengths
  bucket = np.asarray(ds.buckets)[ds.bucket_index]
  assert np.all(bucket >= np.maximum(src, tgt))
  smaller = np.asarray([0] + ds.buckets)[ds.bucket_index]
  assert np.all(smaller < np.maximum(src, tgt))  # the smallest bucket that fits
  plan = batching.epoch_plan(ds.bucket_index, ds.buckets, 480, 1, 0)
  assert sorted(np.concatenate([ix for _, ix in plan]).tolist()) == list(range(len(ds.train)))
  for b, ix in plan:
    assert len(ix) * ds.buckets[b] <= 480
  it = ds.train_iterator(8, 1, prefetch=0)
  shapes = set()
  seen = []
  for _ in range(len(plan)):
    batch = next(it)
    seen += _rows(batch)
    assert batch["inputs"].dtype == np.int32 and batch["inputs"].shape == batch["targets"].shape
    assert batch["inputs"].shape[:2] == (8, 1)
    shapes.add(batch["inputs"].shape)
  assert shapes == set(it.batch_shapes.values()) and len(shapes) <= len(ds.buckets)
  assert it.get_state() == {"epoch": 1, "index": 0}
  # One epoch holds every training pair exactly once, source still next to its target.
  assert sorted(seen) == sorted(_pairs(ds.train))


def test_accum_steps():
  cfg = configs.get_config("base", max_tokens_per_device=25000)
  assert dataset.accum_steps(cfg, 8) == 1
  assert dataset.accum_steps(cfg.replace(max_tokens_per_device=1000), 8) == 4
  assert dataset.accum_steps(cfg.replace(max_tokens_per_device=1000), 1) == 25


def test_same_seed_same_batches_and_resume(ds):
  a, b = ds.train_iterator(8), ds.train_iterator(8)
  epoch = ds.stats["batches_per_epoch"]
  batches = [next(a) for _ in range(epoch + 6)]  # crosses into epoch 1
  for x in batches:
    y = next(b)
    assert np.array_equal(x["inputs"], y["inputs"]) and np.array_equal(x["targets"], y["targets"])
  reseeded = batching.BatchIterator(ds.train, ds.bucket_index, ds.buckets, 480, 2, 8, 1)
  assert [_rows(next(reseeded)) for _ in range(3)] != [_rows(x) for x in batches[:3]]
  # Resume mid-epoch (and across the epoch boundary) from a saved state.
  for stop in (5, epoch - 2):
    c = ds.train_iterator(8)
    for _ in range(stop):
      next(c)
    state = c.get_state()
    c.close()
    d = ds.train_iterator(8, prefetch=1)
    d.set_state(state)
    for x in batches[stop:stop + 4]:
      assert np.array_equal(next(d)["inputs"], x["inputs"])
    d.close()


def test_device_count_does_not_change_the_updates(ds):
  one = ds.train_iterator(1, accum_steps=1)
  eight = ds.train_iterator(8, accum_steps=2)
  hosts = [ds.train_iterator(4, accum_steps=2, process_index=p, process_count=2)
           for p in (0, 1)]
  for _ in range(12):
    b1, b8 = next(one), next(eight)
    assert b8["inputs"].shape[:2] == (8, 2) and b1["inputs"].shape[:2] == (1, 1)
    assert b8["inputs"].shape[2] * 16 >= b1["inputs"].shape[2]
    assert _rows(b1) == _rows(b8)  # the same pairs, in the same order
    shares = [next(h) for h in hosts]
    joined = {k: np.concatenate([s[k] for s in shares]) for k in ("inputs", "targets")}
    assert np.array_equal(joined["inputs"], b8["inputs"])
    assert np.array_equal(joined["targets"], b8["targets"])


def test_dev_batches_cover_every_pair_once(ds):
  seen = []
  shapes = set()
  for batch in ds.dev_batches(8):
    assert batch["inputs"].shape[0] == 8 and batch["inputs"].ndim == 3
    shapes.add(batch["inputs"].shape)
    seen += _rows(batch)
  assert sorted(seen) == sorted(_pairs(ds.dev))
  assert len(shapes) == len({shape[-1] for shape in shapes})  # one shape per bucket


def test_token_cache_is_reused(corpus_dir, tmp_path, monkeypatch):
  cfg = _config(corpus_dir)
  first = dataset.prepare(cfg, str(tmp_path))

  def no_tokenizing(*args, **kwargs):
    raise AssertionError("tokenised again instead of reading the cache")

  monkeypatch.setattr(tokenized, "tokenize_pairs", no_tokenizing)
  again = dataset.prepare(cfg, str(tmp_path))
  assert np.array_equal(first.train.tgt_ids, again.train.tgt_ids)
  with pytest.raises(AssertionError, match="tokenised again"):  # new limits: new cache
    dataset.prepare(cfg.replace(max_source_length=40), str(tmp_path))


def test_demo_dataset_is_generated_into_the_workdir(tmp_path, monkeypatch):
  small = functools.partial(demo.write_corpus, num_train=600, num_dev=50, num_test=50)
  monkeypatch.setattr(demo, "write_corpus", small)
  cfg = configs.get_config("demo", vocab_size=300, tokens_per_batch=512)
  ds = dataset.prepare(cfg, str(tmp_path))
  assert (tmp_path / "data" / "demo" / "train.de").exists()
  assert len(ds.train) + ds.counts["too_long"] == 600 and len(ds.test_sources()) == 50
  assert ds.tokenizer.vocab_size <= 300


def _damage(path, how):
  data_ = path.read_bytes()
  middle = len(data_) // 2
  path.write_bytes({"truncated": data_[:middle], "emptied": b"",
                    "garbled": data_[:middle] + bytes([data_[middle] ^ 0xFF])
                    + data_[middle + 1:]}[how])


@pytest.mark.parametrize("how", ["truncated", "emptied", "garbled"])
def test_a_damaged_token_cache_is_made_again_with_a_warning(corpus_dir, tmp_path, how, caplog):
  cfg = _config(corpus_dir)
  first = dataset.prepare(cfg, str(tmp_path))
  (cache,) = (tmp_path / "data").glob("tokens-*.npz")
  _damage(cache, how)
  again = dataset.prepare(cfg, str(tmp_path))
  assert "is damaged" in caplog.text and "tokenising again" in caplog.text
  for name in tokenized.SPLITS:
    for field in ("src_ids", "src_offsets", "tgt_ids", "tgt_offsets"):
      assert np.array_equal(getattr(getattr(first, name), field),
                            getattr(getattr(again, name), field))
  tokenized.load_cache(str(cache), again.tokenizer.vocab_size)  # whole again


def test_token_cache_checks_offsets_and_id_range(ds, tmp_path):
  splits = {"train": ds.train, "dev": ds.dev, "test": ds.test}
  path = str(tmp_path / "tokens.npz")
  tokenized.save_cache(path, splits, {"kept": 1})
  tokenized.load_cache(path, ds.tokenizer.vocab_size)
  with pytest.raises(ValueError, match="outside the vocabulary"):
    tokenized.load_cache(path, vocab_size=5)
  bad = dict(splits, dev=tokenized.TokenizedSplit(ds.dev.src_ids, ds.dev.src_offsets[:-1],
                                               ds.dev.tgt_ids, ds.dev.tgt_offsets))
  tokenized.save_cache(path, bad, {"kept": 1})
  with pytest.raises(ValueError, match="dev offsets"):
    tokenized.load_cache(path)


def test_a_damaged_demo_corpus_is_written_again(tmp_path, monkeypatch, caplog):
  small = functools.partial(demo.write_corpus, num_train=300, num_dev=20, num_test=20)
  monkeypatch.setattr(demo, "write_corpus", small)
  cfg = configs.get_config("demo", vocab_size=200, tokens_per_batch=512)
  dataset.prepare(cfg, str(tmp_path))
  directory = tmp_path / "data" / "demo"
  original = {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}
  _damage(directory / "train.de", "truncated")
  dataset.prepare(cfg, str(tmp_path))
  assert "demo corpus" in caplog.text and "train.de" in caplog.text
  assert {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()} == original


# Prepares a text dataset in argv[1]; stderr says whether it trained or tokenised.
_PREPARE = """
import json, logging, sys
from t2t_jax import configs
from t2t_jax.data import dataset
logging.basicConfig(level=logging.INFO, force=True)  # orbax's import set a WARNING one
dataset.prepare(configs.get_config("base", **json.loads(sys.argv[2])), sys.argv[1])
"""


def test_concurrent_first_runs_build_vocabulary_and_tokens_once(corpus_dir, tmp_path):
  settings = {k: v for k, v in dataclasses.asdict(_config(corpus_dir)).items()
              if k in ("dataset", "train_files", "dev_files", "test_files", "vocab_size",
                       "max_source_length", "max_target_length", "tokens_per_batch",
                       "max_tokens_per_device", "max_len", "seed")}
  root = pathlib.Path(__file__).resolve().parents[2]
  processes = [subprocess.Popen([sys.executable, "-c", _PREPARE, str(tmp_path),
                                 json.dumps(settings)], cwd=root, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True) for _ in range(3)]
  logs = [p.communicate(timeout=300)[1] for p in processes]
  assert all(p.returncode == 0 for p in processes), logs
  text = "".join(logs)
  assert text.count("Trained vocabulary") == 1 and text.count("Tokenised") == 1, text
  assert text.count("Loaded token ids") == 2


def test_prefetch_thread_does_not_outlive_the_iterator(ds):
  def prefetchers():
    return [t for t in threading.enumerate() if t.name == "batch-prefetch"]

  gc.collect()  # iterators other tests left behind
  before = len(prefetchers())
  it = ds.train_iterator(8)
  next(it)
  assert len(prefetchers()) == before + 1
  it.close()
  assert len(prefetchers()) == before
  it = ds.train_iterator(8)
  next(it)
  del it
  gc.collect()
  assert len(prefetchers()) == before


def test_prefetch_errors_reach_the_caller(ds, monkeypatch):
  def broken(args, state):
    raise RuntimeError("bad batch")

  monkeypatch.setattr(batching, "_make_batch", broken)
  it = ds.train_iterator(8)
  with pytest.raises(RuntimeError, match="bad batch"):
    next(it)
  it.close()


def _packed_pairs(batch):
  """The pairs of a packed batch in global order: rows, then segments within a row."""
  out = []
  sides = [(batch[k].reshape(-1, batch[k].shape[-1]),
            batch[f"{k}_segments"].reshape(-1, batch[k].shape[-1])) for k in ("inputs", "targets")]
  (src, src_seg), (tgt, tgt_seg) = sides
  for row in range(len(src)):
    assert src_seg[row].max() == tgt_seg[row].max()            # every source has its target
    for k in range(1, src_seg[row].max() + 1):
      out.append((tuple(src[row][src_seg[row] == k]), tuple(tgt[row][tgt_seg[row] == k])))
  return out


def test_packed_epoch_holds_every_pair_once_in_one_shape(packed, ds):
  assert packed.pack_lengths == [64, 32] and ds.pack_lengths is None
  it = packed.train_iterator(8, 1, prefetch=0)
  # 480 // 64 = 7 rows -> 8 for 8 devices; 480 // 32 = 15 -> 16.
  assert it.batch_shapes == {64: (8, 1, 1, 64), 32: (8, 1, 2, 32)}
  seen, batches, shapes = [], 0, set()
  while True:
    batch = next(it)
    batches += 1
    shape = batch["inputs"].shape
    assert {k: v.shape for k, v in batch.items()} == dict.fromkeys(
        ("inputs", "targets", "inputs_segments", "targets_segments"), shape)
    shapes.add(shape)
    assert np.count_nonzero(batch["targets"]) <= 480 and np.count_nonzero(batch["inputs"]) <= 480
    seen += _packed_pairs(batch)
    if it.get_state() == {"epoch": 1, "index": 0}:
      break
  assert shapes == set(it.batch_shapes.values())
  assert sorted(seen) == sorted(_pairs(packed.train))
  assert batches == packed.stats["batches_per_epoch"]
  # Fuller batches than one pair per row (the packed config keeps longer pairs too,
  # so compare real tokens per batch, not the number of batches).
  for side in ("source", "target"):
    key = f"{side}_tokens_per_batch"
    assert packed.stats[key]["mean"] > ds.stats[key]["mean"]
  for side in ("source", "target"):
    key = f"padding_efficiency_{side}"
    assert packed.stats[key] > ds.stats[key] and packed.stats[key] <= 1
  assert packed.stats["pairs_per_row"] > 1.5


def test_packed_batches_do_not_depend_on_devices_and_resume_exactly(packed):
  one = packed.train_iterator(1, accum_steps=1)
  eight = packed.train_iterator(8, accum_steps=2)
  hosts = [packed.train_iterator(4, accum_steps=2, process_index=p, process_count=2)
           for p in (0, 1)]
  epoch = packed.stats["batches_per_epoch"]
  reference = []
  for _ in range(epoch + 3):                                    # into epoch 1
    b1, b8 = next(one), next(eight)
    assert _packed_pairs(b1) == _packed_pairs(b8)
    shares = [next(h) for h in hosts]
    for key in b8:
      assert np.array_equal(np.concatenate([s[key] for s in shares]), b8[key])
    reference.append(b8)
  for it in (one, eight, *hosts):
    it.close()
  for stop in (3, epoch - 1):
    c = packed.train_iterator(8, accum_steps=2, prefetch=0)
    for _ in range(stop):
      next(c)
    d = packed.train_iterator(8, accum_steps=2, prefetch=1)
    d.set_state(c.get_state())
    for want in reference[stop:stop + 3]:
      got = next(d)
      assert all(np.array_equal(got[k], want[k]) for k in want)
    d.close()
