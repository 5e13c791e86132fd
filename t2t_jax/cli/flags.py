"""The one command line of every script.

    parser = flags.parser("t2t-foo", __doc__, config="demo")  # config=None: no config flags
    parser.add_argument("--workdir", ...)                    # the script's own flags
    args = parser.parse_args(argv)
    cfg = flags.config(args, defaults={...})  # the preset, then `defaults`, then --config.<field>
    cfg = flags.parse_config(["--config=demo", "--config.d_model=64"])  # config flags alone

`--config=<preset>` names a preset of configs.py and `--config.<field>=<value>`
sets any field of `TransformerConfig`, typed by the field's annotation; `--help`
shows each field's meaning, what it accepts and its value in the preset chosen
on that command line. A mistake in the command line (an unknown flag, preset or
field, a value of the wrong type) ends the command with one line naming the flag
and what it accepts (with a did-you-mean for a misspelt flag), and exit status 2.

Every parser also has `--version`, `--log_level` and `--quiet` (the level is
applied when the arguments are parsed (`apply_log_level`); `@exits.command` has set up
INFO before). How a command ends is cli/exits.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import logging
import os
import sys
import typing
from typing import Any, Callable, Optional, Sequence

import t2t_jax
from t2t_jax import configs

_FIELDS = {f.name: f for f in dataclasses.fields(configs.TransformerConfig)}
_HINTS = typing.get_type_hints(configs.TransformerConfig)
_PREFIX = "config."


class _Parser(argparse.ArgumentParser):
  """argparse with one-line errors, did-you-mean suggestions and the preset's values in --help."""

  preset: Optional[str] = None              # the default --config
  preset_defaults: dict[str, Any] = {}      # the script's defaults on top of the preset
  # The preset and defaults a script runs for a --config name (the WMT14 En-Fr
  # script runs big_enfr for --config=big), so that --help shows those values.
  resolve: Optional[Callable[[str], tuple[str, dict[str, Any]]]] = None

  def error(self, message: str) -> typing.NoReturn:
    self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

  def parse_known_args(self, args: Optional[Sequence[str]] = None,
                       namespace: Optional[argparse.Namespace] = None):
    args = list(sys.argv[1:] if args is None else args)
    self._shown = _given_preset(args) or self.preset  # whose values --help shows
    return super().parse_known_args(args, namespace)

  def parse_args(self, args: Optional[Sequence[str]] = None,
                 namespace: Optional[argparse.Namespace] = None) -> argparse.Namespace:
    parsed, rest = self.parse_known_args(args, namespace)
    for arg in rest:
      if arg.startswith("--" + _PREFIX):
        name = arg[len("--" + _PREFIX):].partition("=")[0]
        close = difflib.get_close_matches(name, _FIELDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        self.error(f"unknown config field {name!r}{hint}; the fields are in t2t_jax/configs.py")
    if rest:
      self.error(f"unrecognized arguments: {' '.join(rest)}{self._suggestion(rest[0])}")
    apply_log_level(parsed)
    return parsed

  def _suggestion(self, arg: str) -> str:
    if not arg.startswith("--"):
      return ""
    flag = arg.partition("=")[0]
    options = [o for o in self._option_string_actions if o.startswith("--")
               and not o.startswith("--" + _PREFIX)]
    close = difflib.get_close_matches(flag.replace("-", "_")[:2].replace("_", "-")
                                      + flag[2:].replace("-", "_"), options, n=1, cutoff=0.7)
    return f" (did you mean {close[0]}?)" if close else ""

  def format_help(self) -> str:
    shown = getattr(self, "_shown", None) or self.preset
    extra: dict[str, Any] = {}
    if shown and self.resolve:
      shown, extra = self.resolve(shown)
    values = configs.get_config(shown, **{**extra, **self.preset_defaults}) if shown else None
    for action in self._actions:
      if action.dest.startswith(_PREFIX):
        name = action.dest[len(_PREFIX):]
        text = f"{configs.meaning(name)}; accepts {configs.accepts(name)}"
        if values is not None:
          text += f" [{shown}: {getattr(values, name)!r}]"
        action.help = text.replace("%", "%%")
    return super().format_help()


class _Formatter(argparse.RawDescriptionHelpFormatter):
  """The usage line names the config fields once, not each of them."""

  def _format_usage(self, usage, actions, groups, prefix):
    kept = [a for a in actions if not a.dest.startswith(_PREFIX)]
    text = super()._format_usage(usage, kept, groups, prefix)
    if len(kept) < len(actions):
      text = text.rstrip("\n") + " [--config.<field>=VALUE ...]\n\n"
    return text


def given_value(args: Sequence[str], flag: str) -> Optional[str]:
  """The value of `flag` (e.g. "--config") on a command line, the last one given, before
  parsing (for --help); None if absent."""
  given = None
  for i, arg in enumerate(args):
    if arg.startswith(flag + "="):
      given = arg.partition("=")[2]
    elif arg == flag and i + 1 < len(args):
      given = args[i + 1]
  return given


def _given_preset(args: Sequence[str]) -> Optional[str]:
  """The --config=<preset> of a command line (the last one given), if any."""
  given = given_value(args, "--config")
  return given if given in configs.PRESETS else None


def _field_type(name: str) -> Callable[[str], Any]:
  """The text -> value function of one config field; its error says what the field accepts."""
  kind, optional = configs._base_type(_HINTS[name])  # pylint: disable=protected-access

  def parse(text: str) -> Any:
    if optional and text.lower() in ("none", "null"):
      return None
    if kind is bool:
      if text.lower() in ("1", "true", "yes"):
        return True
      if text.lower() in ("0", "false", "no"):
        return False
    else:
      try:
        return kind(text)
      except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"bad value {text!r}: {name} accepts {configs.accepts(name)}")

  return parse


def _preset(name: str) -> str:
  if name not in configs.PRESETS:
    raise argparse.ArgumentTypeError(
        f"unknown --config={name}; choose one of {', '.join(configs.PRESETS)}")
  return name


def parser(prog: str, description: Optional[str], config: Optional[str] = None,
           fields: Optional[bool] = None,
           defaults: Optional[dict[str, Any]] = None,
           resolve: Optional[Callable[[str], tuple[str, dict[str, Any]]]] = None
           ) -> argparse.ArgumentParser:
  """A parser for one script, to which it adds its own flags.

  `config` (a preset name) adds `--config=<preset>` with that default; `fields`
  (default: when `config` is given) adds `--config.<field>=<value>` for every
  field; `defaults` are the script's own values between the preset and the
  command line (for --help; `config(args, defaults)` applies them); `resolve`
  maps a --config name to the preset and defaults the script runs for it. Every parser
  has --version, --log_level and --quiet.
  """
  p = _Parser(prog=prog, description=description, allow_abbrev=False,
              formatter_class=_Formatter)
  p.preset, p.preset_defaults, p.resolve = config, dict(defaults or {}), resolve
  p.add_argument("--version", action="version", version=f"%(prog)s {t2t_jax.__version__}")
  p.add_argument("--log_level", choices=LOG_LEVELS, default=None,
                 help="the least important log lines shown on stderr (default: info)")
  p.add_argument("--quiet", action="store_true",
                 help="warnings and errors only (--log_level=warning)")
  if config is not None:
    p.add_argument("--config", type=_preset, default=config, metavar="PRESET",
                   help=f"a preset of t2t_jax/configs.py: {', '.join(configs.PRESETS)} "
                        f"(default: {config})")
  if fields or (fields is None and config is not None):
    group = p.add_argument_group(
        "config fields", "--config.<field>=<value> sets one field of t2t_jax/configs.py, "
        "after the preset and the script's own defaults; [preset: value] is the value "
        "without the flag")
    for name in _FIELDS:
      group.add_argument(f"--{_PREFIX}{name}", dest=_PREFIX + name, type=_field_type(name),
                         default=argparse.SUPPRESS, metavar="VALUE",
                         help=configs.meaning(name))
  return p


def add_process_flags(p: argparse.ArgumentParser) -> None:
  """--multihost, --coordinator_address, --num_processes, --process_id (runtime/multihost.py)."""
  group = p.add_argument_group(
      "several processes (docs/training.md)",
      "every process runs the same command; --multihost alone detects the cluster "
      "(SLURM, Open MPI, Cloud TPU, Kubernetes); the other flags (or JAX_COORDINATOR_ADDRESS, "
      "JAX_NUM_PROCESSES, JAX_PROCESS_ID) work anywhere, also on one machine")
  group.add_argument("--multihost", action="store_true",
                     help="join a multi-process run (jax.distributed)")
  group.add_argument("--coordinator_address", metavar="HOST:PORT",
                     help="where process 0 runs the coordinator (a free port on its host)")
  group.add_argument("--num_processes", type=int, metavar="N", help="processes in the run")
  group.add_argument("--process_id", type=int, metavar="I", help="this process: 0 .. N-1")


def config_default(cfg: Optional[configs.TransformerConfig], field: str) -> str:
  """A flag's help about its default: a work directory's value, or the field's name."""
  return (f"default: this work directory's: {getattr(cfg, field)}" if cfg is not None
          else f"default: the config's {field}")


def add_search_flags(p: Any, cfg: Optional[configs.TransformerConfig] = None) -> None:
  """--beam_size, --alpha, --max_decode_extra (or --max_len_b): the decoding defaults a
  command may override, on a parser or an argument group; `cfg`: the values --help shows."""
  default = functools.partial(config_default, cfg)
  p.add_argument("--beam_size", type=int, metavar="K", help=default("beam_size"))
  p.add_argument("--alpha", type=float, help=f"length penalty exponent; {default('alpha')}")
  p.add_argument("--max_decode_extra", "--max_len_b", type=int, metavar="B",
                 help=f"max output length = input length + B; {default('max_decode_extra')}")


def search_overrides(args: argparse.Namespace) -> dict[str, Any]:
  """The config fields `add_search_flags`' flags set, {field: value}."""
  return {name: getattr(args, name) for name in ("beam_size", "alpha", "max_decode_extra")
          if getattr(args, name) is not None}


def joins_processes(args: argparse.Namespace) -> bool:
  """Whether `add_process_flags`' flags (or their environment variables) ask to join a run."""
  env = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")
  return (args.multihost or args.coordinator_address is not None
          or args.num_processes is not None or args.process_id is not None
          or any(os.environ.get(name) for name in env))


def overrides(args: argparse.Namespace) -> dict[str, Any]:
  """The config fields given on the command line, {field: value}, in the order given."""
  return {k[len(_PREFIX):]: v for k, v in vars(args).items() if k.startswith(_PREFIX)}


def config(args: argparse.Namespace, defaults: Optional[dict[str, Any]] = None,
           preset: Optional[str] = None) -> configs.TransformerConfig:
  """The preset (`preset` or `--config`), then `defaults`, then the --config.<field> values."""
  return configs.get_config(preset or args.config, **{**(defaults or {}), **overrides(args)})


def parse_config(argv: Sequence[str], preset: str = "demo",
                 defaults: Optional[dict[str, Any]] = None) -> configs.TransformerConfig:
  """The config that `--config=` and `--config.<field>=` arguments alone give (notebooks)."""
  return config(parser("config", None, config=preset).parse_args(argv), defaults)


# ------------------------------------------------------------------------- logging
# How a command logs: INFO lines on stderr with time and module, the libraries' chatter
# kept to warnings (`setup_logging`: exits.command calls it before a command's main);
# `--log_level` / `--quiet` applied when the parser parses (`apply_log_level`).

LOG_LEVELS = ("debug", "info", "warning", "error")


def apply_log_level(args: argparse.Namespace) -> None:
  """--quiet / --log_level, if given, on the root logger (parse_args does this)."""
  level = "warning" if getattr(args, "quiet", False) else getattr(args, "log_level", None)
  if level is not None:
    logging.getLogger().setLevel(level.upper())


class _StderrHandler(logging.StreamHandler):
  """Writes to whatever `sys.stderr` is when a line is logged (tests replace it)."""

  def __init__(self):
    super().__init__()
    self.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))

  @property
  def stream(self):
    return sys.stderr

  @stream.setter
  def stream(self, _):
    pass


def setup_logging() -> None:
  """INFO lines on stderr with time and module; the libraries' chatter kept to warnings."""
  root = logging.getLogger()
  root.setLevel(logging.INFO)
  if not any(isinstance(h, _StderrHandler) for h in root.handlers):
    # absl's first log call (orbax logs at import) runs a bare logging.basicConfig();
    # ours replaces that handler, so every line is printed once, in one format.
    for handler in list(root.handlers):
      if type(handler) is logging.StreamHandler and handler.stream in (sys.stderr,
                                                                        sys.__stderr__):
        root.removeHandler(handler)
    root.addHandler(_StderrHandler())
  # Orbax reports every save step at INFO through absl; keep its warnings only.
  logging.getLogger("absl").setLevel(logging.WARNING)
  logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # "no TPU" notices
