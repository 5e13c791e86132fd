"""Shared test setup: 8 virtual CPU devices, as in the paper's 8-GPU machine."""

import os

# Must happen before JAX initialises its backend; the README's test command sets
# it too, this only covers running a single test file by hand.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
