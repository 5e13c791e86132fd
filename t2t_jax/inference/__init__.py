"""Text in, text out with trained models: the translator, BLEU, attention maps.

`from t2t_jax import inference; inference.Translator(workdir).translate([...])`: the one
way to translate from Python. Its parts are public for the commands, the server and the
benchmarks: `streaming` (a stream of lines in bounded memory), `sentence_batches` (many
sentences sorted into batches, ids in and out) and `long_inputs` (lines longer than the model
takes).
"""

from t2t_jax.inference.translator import load_tokenizer as load_tokenizer
from t2t_jax.inference.translator import Translator as Translator

__all__ = ["Translator", "load_tokenizer", "bleu", "long_inputs", "sentence_batches", "streaming",
           "translator", "visualize"]
