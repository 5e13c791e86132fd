"""The one command-line parser and the one way a command fails."""

import logging
import pathlib
import signal

import pytest

from t2t_jax import configs
from t2t_jax.cli import flags as cli
from t2t_jax.runtime import preemption


def _parser():
  parser = cli.parser("prog", None, config="demo")
  parser.add_argument("--workdir")
  return parser


def _usage_error(capsys, argv, parser=None):
  with pytest.raises(SystemExit) as e:
    (parser or _parser()).parse_args(argv)
  assert e.value.code == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1, err  # one line
  return err


def test_preset_then_defaults_then_fields_and_the_script_flags():
  args = _parser().parse_args(
      ["--config=C4", "--config.dropout_rate=0.2", "--config.attention_window=none",
       "--config.share_embeddings=false", "--config.d_v=16", "--workdir=/tmp/x"])
  cfg = cli.config(args, defaults={"dropout_rate": 0.3, "num_train_steps": 7})
  assert (cfg.d_model, cfg.d_k, cfg.d_v) == (256, 32, 16)        # preset, then override
  assert cfg.dropout_rate == 0.2 and cfg.num_train_steps == 7     # the command line wins
  assert cfg.attention_window is None and cfg.share_embeddings is False
  assert args.workdir == "/tmp/x"
  assert cli.overrides(args) == {"dropout_rate": 0.2, "attention_window": None,
                                 "share_embeddings": False, "d_v": 16}
  cfg = cli.parse_config(["--config.attention_window", "3"], preset="base")
  assert cfg.attention_window == 3 and cfg.d_model == 512
  assert cli.parse_config([]) == configs.get_config("demo")


def test_mistakes_give_one_line_naming_the_flag_and_what_it_accepts(capsys):
  err = _usage_error(capsys, ["--config.d_modle=3"])
  assert "unknown config field 'd_modle' (did you mean 'd_model'?)" in err
  err = _usage_error(capsys, ["--config.num_layers=six"])
  assert "--config.num_layers: bad value 'six': num_layers accepts a positive integer" in err
  err = _usage_error(capsys, ["--config.num_layers=none"])  # not an Optional field
  assert "bad value 'none': num_layers accepts a positive integer (" in err
  assert "d_k accepts a positive integer or None" in _usage_error(capsys, ["--config.d_k=x"])
  assert "unknown --config=huge; choose one of base" in _usage_error(capsys, ["--config=huge"])
  assert "unrecognized arguments: --wrokdir=x" in _usage_error(capsys, ["--wrokdir=x"])
  # No prefix matching: a shortened flag is not taken for a longer one.
  assert "unknown config field 'd_mod'" in _usage_error(capsys, ["--config.d_mod=8"])
  # A parser without config flags says the same about them.
  err = _usage_error(capsys, ["--config.d_model=8"], cli.parser("plain", None))
  assert "unknown config field 'd_model'" in err


def test_command_turns_ordinary_errors_into_one_line_and_keeps_bugs(capsys):
  @cli.command
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
