"""`python tests/serve/fake_server.py GATE`: the server with the fake engine, whose batches wait
until the file GATE exists (and write GATE.started), for tests that signal a real process."""

import pathlib
import sys
import time

from t2t_jax.cli import flags
from t2t_jax.serve import app as app_lib

from fake_engine import FakeEngine

BODY_TIMEOUT = 2.0   # seconds without a byte of the body: short, for the tests that wait it out


class FileGate:
  def __init__(self, path: pathlib.Path):
    self.path = path

  def wait(self, timeout: float) -> bool:
    pathlib.Path(f"{self.path}.started").touch()
    for _ in range(int(timeout * 100)):
      if self.path.exists():
        return True
      time.sleep(0.01)
    return False


if __name__ == "__main__":
  flags.setup_logging()
  engine = FakeEngine()
  engine.gate = FileGate(pathlib.Path(sys.argv[1]))
  options = app_lib.Options(max_wait=0.0, workers=1, body_timeout=BODY_TIMEOUT)
  app_lib.serve(app_lib.create_app(engine, options), "127.0.0.1", 0)
