"""train/memory.py: XLA's memory analysis of the train step, and the micro-batch that fits."""

import math

import jax
import pytest

from t2t_jax import configs
from t2t_jax.data import dataset
from t2t_jax.train import memory

# Tiny; no explicit max_tokens_per_device, so resolving it compiles.
CFG = configs.get_config("demo", vocab_size=64, num_layers=1, d_model=16, d_ff=32, num_heads=2,
                         max_len=32, tokens_per_batch=512, max_tokens_per_device=None)
LENGTH = 16


@pytest.fixture(scope="module")
def sizes():
  """Peak bytes of the step at 1, 8 and 32 rows (32 = the whole update on one device)."""
  return {rows: memory.step_memory(CFG, rows, LENGTH) for rows in (1, 8, 32)}


@pytest.fixture
def compiled_once(sizes, monkeypatch):
  """memory.step_memory compiling each micro-batch once in a test, starting from `sizes`:
  fitting asks for 32 and 8 rows first, which `sizes` already compiled."""
  known = {(CFG, rows, LENGTH, False): stats for rows, stats in sizes.items()}
  compile_step = memory.step_memory

  def step_memory(cfg, rows, length, packed=False, device=None):
    if device not in (None, jax.local_devices()[0]):
      return compile_step(cfg, rows, length, packed, device)
    if (cfg, rows, length, packed) not in known:
      known[cfg, rows, length, packed] = compile_step(cfg, rows, length, packed, device)
    return known[cfg, rows, length, packed]
  monkeypatch.setattr(memory, "step_memory", step_memory)


def test_step_memory_counts_the_state_once_and_grows_with_the_rows(sizes):
  one, eight, full = sizes[1], sizes[8], sizes[32]
  params = configs.count_params(CFG)
  # The donated state (params and two Adam moments, float32) comes back in place.
  assert 3 * 4 * params <= one.aliased <= 3 * 4 * params + 1024
  assert one.arguments >= one.aliased and one.peak < one.arguments + one.outputs + one.temporaries
  assert one.temporaries < eight.temporaries < full.temporaries
  # Affine in the rows, as fit_rows assumes (within XLA's scheduling noise).
  slope = (full.peak - eight.peak) / 24
  assert abs(eight.peak - (one.peak + 7 * slope)) < 0.25 * (eight.peak - one.peak)


def test_an_explicit_setting_wins_without_compiling(monkeypatch):
  monkeypatch.setattr(memory, "step_memory", lambda *a, **k: pytest.fail("compiled"))
  cfg = CFG.replace(max_tokens_per_device=100)
  assert memory.resolve_max_tokens_per_device(cfg, 8, LENGTH) is cfg


def test_a_small_device_gets_accumulation_that_fits(sizes, compiled_once, monkeypatch):
  # A device with room for about a third of the update: between 8 and 32 rows.
  budget = sizes[8].peak + (sizes[32].peak - sizes[8].peak) // 3
  monkeypatch.setattr(memory, "device_memory",
                      lambda device=None: int(budget / (1 - CFG.memory_margin)) + 1)
  cfg = memory.resolve_max_tokens_per_device(CFG, 1, LENGTH)
  accum = dataset.accum_steps(cfg, 1)
  assert 2 <= accum <= 4
  rows = math.ceil(CFG.tokens_per_batch // LENGTH / accum)      # the longest batches' micro-step
  assert memory.step_memory(CFG, rows, LENGTH).peak <= budget
  # On a device that holds it all, one micro-step per update.
  monkeypatch.setattr(memory, "device_memory", lambda device=None: 1 << 40)
  assert dataset.accum_steps(memory.resolve_max_tokens_per_device(CFG, 1, LENGTH), 1) == 1


def test_nothing_fits_is_a_clear_error(compiled_once, monkeypatch):
  monkeypatch.setattr(memory, "device_memory", lambda device=None: 1000)
  with pytest.raises(ValueError, match="one row of 16 tokens needs"):
    memory.resolve_max_tokens_per_device(CFG, 1, LENGTH)


def test_an_accelerator_without_a_memory_figure_is_an_error():
  class Device:
    platform, device_kind = "tpu", "TPU v5"

    def memory_stats(self):
      return None

  with pytest.raises(ValueError, match="--config.max_tokens_per_device"):
    memory.device_memory(Device())

