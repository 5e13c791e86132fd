"""How a command ends: one line for what a user can fix, a traceback for a bug."""

import logging
import pathlib
import signal
import sys

import pytest

from t2t_jax import configs
from t2t_jax import errors
from t2t_jax.cli import exits
from t2t_jax.runtime import preemption
from t2t_jax.runtime import workdir as workdir_lib
from t2t_jax.train import memory


def test_command_turns_ordinary_errors_into_one_line_and_keeps_bugs(capsys):
  @exits.command
  def main(argv, fail):
    logging.getLogger("t2t_jax.test").info("ran with %s", argv)
    raise fail

  import orbax.checkpoint  # pylint: disable=unused-import  (its import configures logging)
  with pytest.raises(SystemExit, match=r"^error: no such file$") as e:
    main(["a"], FileNotFoundError("no such file\nsecond line"))
  assert e.value.code == "error: no such file"  # printed on stderr; exit status 1
  # INFO lines reach stderr, once each, however the libraries set up logging.
  assert capsys.readouterr().err.count("t2t_jax.test: ran with ['a']") == 1
  with pytest.raises(SystemExit, match="diverged"):
    main([], FloatingPointError("diverged at step 3"))
  with pytest.raises(KeyError):  # a bug keeps its traceback
    main([], KeyError("x"))
  assert main.__name__ == "main"
  capsys.readouterr()
  # A run stopped by a signal after saving: its line, and the status a shell gives that signal.
  with pytest.raises(SystemExit) as e:
    main([], preemption.Preempted("stopped on SIGTERM after step 7; ...", signal.SIGTERM))
  assert e.value.code == 128 + signal.SIGTERM
  assert capsys.readouterr().err.splitlines()[-1] == "stopped on SIGTERM after step 7; ..."



def test_only_the_command_layer_ends_the_process():
  """Library code raises or returns; cli decides when a process ends (and how)."""
  package = pathlib.Path(configs.__file__).parent
  for path in package.rglob("*.py"):
    if path.name == "cli.py" or "cli" in path.relative_to(package).parts[:-1]:
      continue
    text = path.read_text()
    for call in ("os._exit(", "sys.exit(", "jax._src"):
      assert call not in text, f"{path.relative_to(package)} uses {call}"


@pytest.mark.parametrize("error", [
    errors.MissingExtraError("the serve extra is not installed: pip install -e '.[serve]'"),
    workdir_lib.WorkdirBusyError("runs/demo is in use by pid 7 on host a"),
    memory.DeviceMemoryError("out of device memory (...); lower --config.max_tokens_per_device"),
    ValueError("checkpoint step 6 does not restore into the given state; use a new workdir"),
])
def test_what_a_user_can_fix_is_one_line(error):
  @exits.command
  def main(argv=None):
    raise error

  with pytest.raises(SystemExit, match=r"^error: ") as e:
    main([])
  assert e.value.code == f"error: {error}"


def test_a_runtime_error_is_a_bug_and_keeps_its_traceback():
  @exits.command
  def main(argv=None):
    raise RuntimeError("the engine gave 3 results for 4 lines")

  with pytest.raises(RuntimeError, match="3 results for 4 lines"):
    main([])


def test_console_scripts_exit_0_whatever_their_main_returns():
  """setuptools' script runs sys.exit(entry()): a main's returned results must not become
  the exit status (a dict is printed and exits 1)."""
  import importlib  # pylint: disable=import-outside-toplevel
  import re  # pylint: disable=import-outside-toplevel

  @exits.command
  def returns_results(argv=None):
    return {"fits": True}

  with pytest.raises(SystemExit) as exit_info:
    sys.exit(returns_results.console())
  assert exit_info.value.code is None                              # status 0
  setup = (pathlib.Path(__file__).parents[2] / "setup.py").read_text()
  scripts = re.findall(r'"(t2t-[\w-]+)=([\w.]+):([\w.]+)"', setup)
  assert len(scripts) >= 6
  for name, module, attr in scripts:
    entry = importlib.import_module(module)
    for part in attr.split("."):
      entry = getattr(entry, part)
    assert entry.__name__ == "console", f"{name} must point at main.console, not {attr}"
