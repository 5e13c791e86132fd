"""The one command-line parser."""

import logging

import pytest

from t2t_jax import configs
from t2t_jax.cli import flags


def _parser():
  parser = flags.parser("prog", None, config="demo")
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
       "--config.packing=false", "--config.d_v=16", "--workdir=/tmp/x"])
  cfg = flags.config(args, defaults={"dropout_rate": 0.3, "num_train_steps": 7})
  assert (cfg.d_model, cfg.d_k, cfg.d_v) == (256, 32, 16)        # preset, then override
  assert cfg.dropout_rate == 0.2 and cfg.num_train_steps == 7     # the command line wins
  assert cfg.attention_window is None and cfg.packing is False
  assert args.workdir == "/tmp/x"
  assert flags.overrides(args) == {"dropout_rate": 0.2, "attention_window": None,
                                 "packing": False, "d_v": 16}
  cfg = flags.parse_config(["--config.attention_window", "3"], preset="base")
  assert cfg.attention_window == 3 and cfg.d_model == 512
  assert flags.parse_config([]) == configs.get_config("demo")


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
  err = _usage_error(capsys, ["--config.d_model=8"], flags.parser("plain", None))
  assert "unknown config field 'd_model'" in err


def _help(capsys, argv, parser=None):
  with pytest.raises(SystemExit) as e:
    (parser or _parser()).parse_args([*argv, "--help"])
  assert e.value.code == 0
  return " ".join(capsys.readouterr().out.split())


def test_help_shows_each_fields_meaning_and_the_chosen_presets_value(capsys):
  text = _help(capsys, ["--config=big"])
  assert ("--config.d_model VALUE width of every layer's input and output (and the "
          "embeddings); accepts a positive integer [big: 1024]") in text
  assert "accepts a number in [0, 1) [big: 0.3]" in text       # dropout_rate
  for name in configs.TransformerConfig.__dataclass_fields__:
    assert f"--config.{name} VALUE {configs.meaning(name)}; accepts" in text, name
  assert "[demo: 128]" in _help(capsys, [])                      # the default preset's values
  assert "[big_enfr: 0.1]" in _help(capsys, ["--config", "big_enfr"])
  script = flags.parser("prog", None, config="parsing", defaults={"max_target_length": 768})
  assert "[parsing: 768]" in _help(capsys, [], script)           # the script's own defaults
  # The usage line names the config fields once.
  assert text.count("--config.d_model") == 1 and "[--config.<field>=VALUE ...]" in text


def test_version_log_level_quiet_and_did_you_mean(capsys):
  import t2t_jax  # pylint: disable=import-outside-toplevel
  with pytest.raises(SystemExit) as e:
    flags.parser("t2t-x", None).parse_args(["--version"])
  assert e.value.code == 0 and capsys.readouterr().out == f"t2t-x {t2t_jax.__version__}\n"
  root = logging.getLogger()
  level = root.level
  try:
    _parser().parse_args(["--quiet"])
    assert root.level == logging.WARNING
    _parser().parse_args(["--log_level=debug"])
    assert root.level == logging.DEBUG
    root.setLevel(logging.INFO)
    _parser().parse_args([])                                     # no flag: left as set up
    assert root.level == logging.INFO
  finally:
    root.setLevel(level)
  assert ("unrecognized arguments: --work-dir=x (did you mean --workdir?)"
          in _usage_error(capsys, ["--work-dir=x"]))
  assert "(did you mean" not in _usage_error(capsys, ["--zzz"])


def test_lines_reach_stderr_once_each_however_the_libraries_set_up_logging(capsys):
  logging.basicConfig()   # what absl's first log call does (orbax logs at import)
  flags.setup_logging()
  flags.setup_logging()    # a second command in the same process
  logging.getLogger("t2t_jax.test").info("ran")
  logging.getLogger("absl").info("saved step 5")   # the libraries' chatter: warnings only
  err = capsys.readouterr().err
  assert err.count("t2t_jax.test: ran") == 1 and "saved step 5" not in err
