"""Text in, text out with trained models, and what a translation command adds to the search.

`from t2t_jax import inference; inference.Translator(workdir).translate([...])`: the one
way to translate from Python. Its parts are public for the commands, the server and the
benchmarks: `streaming` (a stream of lines in bounded memory), `long_inputs` (lines longer
than the model takes), `shortlist` (the lexical shortlist), `sampling` and `alignment`
(samples and word alignments beside beam search), `scoring` (the log-probability of given
translations), `stored_programs` (compiled programs kept in a work directory) and
`visualize` (attention maps). The text <-> ids conversions
and BLEU it shares with training are t2t_jax/evaluation/.
"""

import importlib

# Loaded on first use: the translator brings every decoding feature with it.
_LAZY = {"Translator": "translator", "load_tokenizer": "translator"}


def __getattr__(name: str):
  if name in _LAZY:
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Translator", "load_tokenizer", "alignment", "long_inputs", "scoring", "shortlist", "stored_programs", "streaming", "translator", "visualize"]
