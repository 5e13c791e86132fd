"""How a command logs: each line once on stderr, in one format, whoever set up logging first."""

import logging

from t2t_jax.cli import logs


def test_lines_reach_stderr_once_each_however_the_libraries_set_up_logging(capsys):
  logging.basicConfig()   # what absl's first log call does (orbax logs at import)
  logs.setup_logging()
  logs.setup_logging()    # a second command in the same process
  logging.getLogger("t2t_jax.test").info("ran")
  logging.getLogger("absl").info("saved step 5")   # the libraries' chatter: warnings only
  err = capsys.readouterr().err
  assert err.count("t2t_jax.test: ran") == 1 and "saved step 5" not in err
