"""The trained test model served by `t2t-serve` in a process of its own, shared by the tests."""

import pytest

import extras as extras_lib

# Every test file here imports the serve extra (FastAPI, uvicorn...) at its top: without
# it they skip unimported (T2T_JAX_REQUIRE_EXTRAS=1 makes that a failure, as in CI).
pytest_pycollect_makemodule = extras_lib.skip_modules_without("serve")

@pytest.fixture(scope="session")
def jax_server(trained_workdir):
  """The process and its (host, port); stopped with SIGTERM at the end (exit status 0)."""
  import processes  # pylint: disable=import-outside-toplevel  (imports uvicorn: see above)
  process = processes.start(["-m", "t2t_jax.cli.serve", "--workdir", str(trained_workdir),
                             "--port", "0", *processes.SERVER_FLAGS])
  yield process
  assert process.stop() == 0, "".join(process.log[-20:])
