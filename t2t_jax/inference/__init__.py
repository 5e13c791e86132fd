"""Text in, text out with trained models: the translator, streaming, BLEU, attention maps.

`from t2t_jax import inference; inference.Translator(workdir).translate([...])`.
"""

from t2t_jax.inference.translator import load_model as load_model
from t2t_jax.inference.translator import load_tokenizer as load_tokenizer
from t2t_jax.inference.translator import translate_lines as translate_lines
from t2t_jax.inference.translator import Translator as Translator
