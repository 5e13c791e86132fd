"""The trained test model served by `t2t-serve` in a process of its own, shared by the tests."""

import pytest

import processes

# Lines of at most 6 pieces: with --max_batch 2 they decode in the 2 batch shapes the
# warm-up compiles ([1 or 2 rows, 8 positions]), so the tests pay for no others.
LINES = ["I slept.", "We sleep.", "Do we wait?", "They sing.", "She is rich.", "He plays.",
         "They wait.", "We are big."]
SERVER_FLAGS = ["--max_batch", "2", "--warmup_pieces", "6", "--max_wait_ms", "20"]


@pytest.fixture(scope="session")
def jax_server(trained_workdir):
  """The process and its (host, port); stopped with SIGTERM at the end (exit status 0)."""
  process = processes.start(["-m", "t2t_jax.cli.serve", "--workdir", str(trained_workdir),
                             "--port", "0", *SERVER_FLAGS])
  yield process
  assert process.stop() == 0, "".join(process.log[-20:])
