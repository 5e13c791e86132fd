"""Text in, text out with trained models: the translator, BLEU, attention maps.

`from t2t_jax import inference; inference.Translator(workdir).translate([...])`: the one
way to translate from Python. Its parts are public for the commands, the server and the
benchmarks: `streaming` (a stream of lines in bounded memory), `text` (the conversions every
path shares, and the one-model translation of a test set that training scores) and
`long_inputs` (lines longer than the model takes).
"""

import importlib

# Loaded on first use: a training run imports `bleu` and `text` for its test set, and the
# translator would bring every decoding feature with it.
_LAZY = {"Translator": "translator", "load_tokenizer": "translator"}


def __getattr__(name: str):
  if name in _LAZY:
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Translator", "load_tokenizer", "bleu", "long_inputs", "streaming", "text",
           "translator", "visualize"]
