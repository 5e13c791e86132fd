"""Text in, text out with trained models: the translator, BLEU, attention maps.

`from t2t_jax import inference; inference.Translator(workdir).translate([...])`: the one
way to translate from Python (streaming.py, sentence_batches.py and long_inputs.py are
its parts).
"""

from t2t_jax.inference.translator import load_model as load_model
from t2t_jax.inference.translator import load_tokenizer as load_tokenizer
from t2t_jax.inference.translator import Translator as Translator

__all__ = ["Translator", "load_model", "load_tokenizer", "bleu", "visualize"]
