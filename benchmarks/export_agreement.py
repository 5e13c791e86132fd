"""How closely the exported models follow ours: logits, and beam-search translations.

    python benchmarks/export_agreement.py --workdir runs/demo [--sentences 200] [--beam_size 4]

Needs the export extras (`pip install -e .[export]`). Sources are the first
`--sentences` lines of `--source` (default: the work directory's demo test set).
Prints:
  1. the largest |logit difference| between ours and transformers on real target
     positions (teacher-forced on our translations), for the export as written
     and two controls: without the epsilon rescaling (Marian's layer-norm epsilon
     1e-5 acting on every layer norm) and that mapping with transformers' layer
     norms set to our 1e-6 (float32 rounding alone);
  2. how many translations transformers (num_beams, length_penalty) and
     CTranslate2 float32 and int8 (beam_size, length_penalty) share with ours,
     without a length penalty (alpha = 0 everywhere: the same ranking) and with
     0.6 (ours GNMT ((5 + |Y|) / 6)^0.6, theirs |Y|^0.6: not the same ranking),
     and the BLEU of each against the references when `--references` exists;
  3. how many translations CTranslate2 float32 shares with ours when called as
     its documentation calls a Marian model (the exported MarianTokenizer's
     pieces with their </s>, `translate_batch`), greedy and beam 4, alpha 0.

    python benchmarks/export_agreement.py --workdir runs/demo --random base [--sentences 64]

prints only 3., for a model of that preset with random parameters (seed 7) and
the work directory's vocabulary, each output bounded as ours.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from t2t_jax import configs  # noqa: E402
from t2t_jax.export import ctranslate2 as ctranslate2_lib  # noqa: E402
from t2t_jax.export import exported_search  # noqa: E402
from t2t_jax.export import huggingface  # noqa: E402
from t2t_jax.export import loading  # noqa: E402
from t2t_jax.ids import EOS_ID, PAD_ID  # noqa: E402
from t2t_jax.decoding import sentence_batches  # noqa: E402
from t2t_jax.inference import translator as translator_lib
from t2t_jax.model import transformer


def _padded(rows):
  out = np.zeros((len(rows), max(map(len, rows))), np.int32)
  for r, row in enumerate(rows):
    out[r, :len(row)] = row
  return out


def _logit_differences(cfg, params, sources, outputs) -> dict[str, float]:
  torch = loading.require("torch")
  inputs = _padded(sources)
  targets = _padded([o + [EOS_ID] for o in outputs])
  ours = np.asarray(transformer.Transformer(cfg.model).apply({"params": params},
                                                             jnp.asarray(inputs),
                                                             jnp.asarray(targets)))
  real = targets != 0
  decoder_inputs = np.array(transformer.shift_right(targets))  # writable, for torch

  def largest(marian):
    with torch.no_grad():
      theirs = marian(input_ids=torch.from_numpy(inputs).long(),
                      attention_mask=torch.from_numpy(inputs != 0).long(),
                      decoder_input_ids=torch.from_numpy(decoder_inputs).long()).logits.numpy()
    return float(np.abs(theirs - ours)[real].max())

  plain = huggingface.marian_model(cfg, params, rescale_epsilon=False)
  result = {"export (epsilon rescaled)": largest(huggingface.marian_model(cfg, params)),
            "without the rescaling": largest(plain)}
  for module in plain.modules():
    if isinstance(module, torch.nn.LayerNorm):
      module.eps = cfg.layer_norm_epsilon
  result["control: transformers with epsilon 1e-6"] = largest(plain)
  result["largest |logit|"] = float(np.abs(ours[real]).max())
  return result


def _bleu(hypotheses, references) -> str:
  import sacrebleu  # pylint: disable=import-outside-toplevel
  return f"{sacrebleu.corpus_bleu(hypotheses, [references]).score:.2f}"


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--source", help="default: WORKDIR/data/demo/test.en")
  parser.add_argument("--references", help="default: WORKDIR/data/demo/test.de")
  parser.add_argument("--sentences", type=int, default=200)
  parser.add_argument("--beam_size", type=int, default=4)
  parser.add_argument("--random", metavar="PRESET",
                      help="only the documented recipe, on random parameters of this preset")
  args = parser.parse_args()
  workdir = pathlib.Path(args.workdir)
  source = pathlib.Path(args.source or workdir / "data" / "demo" / "test.en")
  references = pathlib.Path(args.references or workdir / "data" / "demo" / "test.de")
  lines = source.read_text(encoding="utf-8").splitlines()[:args.sentences]
  refs = references.read_text(encoding="utf-8").splitlines()[:args.sentences] \
      if references.is_file() else None

  ctranslate2 = loading.require("ctranslate2")
  if args.random:
    _random_recipe(ctranslate2, args.random, workdir, lines)
    return
  loading.require("torch").set_num_threads(os.cpu_count() or 1)
  cfg, params, spm_path = loading.load_workdir(workdir)
  tokenizer = translator_lib.load_tokenizer(workdir)
  tokens = loading.vocabulary(spm_path, cfg.vocab_size)
  ids = [tokenizer.encode(line)[:-1][:cfg.max_len - 1] + [EOS_ID] for line in lines]
  limits = exported_search.output_limits(cfg, ids)
  print(f"{workdir}: {len(ids)} sentences of {source}, beam {args.beam_size}")

  ours = {alpha: sentence_batches.decode_ids(cfg, params, [i[:-1] for i in ids],
                                             beam_size=args.beam_size, alpha=alpha)
          for alpha in (0.0, 0.6)}
  print("logits, ours vs transformers (largest |difference| on real positions):")
  for name, value in _logit_differences(cfg, params, ids, ours[0.0]).items():
    print(f"  {name:40} {value:.3g}")

  marian = huggingface.marian_model(cfg, params)
  with tempfile.TemporaryDirectory() as tmp:
    ctranslate2_lib.export_ctranslate2(workdir, pathlib.Path(tmp) / "ct2")
    translators = {kind: ctranslate2.Translator(str(pathlib.Path(tmp) / "ct2"), device="cpu",
                                                compute_type=kind) for kind in ("float32", "int8")}
    print(f"translations identical to ours, of {len(ids)}"
          + (" (BLEU vs references: ours / theirs)" if refs else ""))
    for alpha in (0.0, 0.6):
      theirs = {"transformers": exported_search.marian_generate(
          marian, ids, limits, beam_size=args.beam_size, length_penalty=alpha)}
      for kind, translator in translators.items():
        theirs[f"ctranslate2 {kind}"] = exported_search.ctranslate2_translate(
            translator, tokens, ids, limits, beam_size=args.beam_size, length_penalty=alpha)[0]
      for name, outputs in theirs.items():
        same = sum(a == b for a, b in zip(ours[alpha], outputs))
        bleu = (f"  BLEU {_bleu([tokenizer.decode(o) for o in ours[alpha]], refs)} / "
                f"{_bleu([tokenizer.decode(o) for o in outputs], refs)}") if refs else ""
        padded = sum(PAD_ID in o for o in outputs)
        print(f"  alpha/length_penalty {alpha}: {name:22} {same:5d}{bleu}"
              f"{f'  ({padded} with <pad>)' if padded else ''}")
    _recipe_agreement(ctranslate2, pathlib.Path(tmp) / "ct2", cfg, params, lines, ids)


def _random_recipe(ctranslate2, preset, workdir, lines) -> None:
  """3. for random parameters of `preset`; ids past the work directory's pieces are placeholders."""
  cfg = configs.get_config(preset)
  params = jax.device_get(transformer.init_params(cfg.model, jax.random.key(7)))
  tokenizer = translator_lib.load_tokenizer(workdir)
  ids = [tokenizer.encode(line)[:-1][:cfg.max_len - 1] + [EOS_ID] for line in lines]
  print(f"random {preset} parameters (seed 7): {len(ids)} sentences")
  with tempfile.TemporaryDirectory() as tmp:
    out = ctranslate2_lib.write_ctranslate2(cfg, params, tokenizer.model_path,
                                            pathlib.Path(tmp) / "ct2")
    _recipe_agreement(ctranslate2, out, cfg, params, lines, ids)


def _recipe_agreement(ctranslate2, directory, cfg, params, lines, ids) -> None:
  """3. CTranslate2 float32 called as its documentation calls a Marian model, greedy and beam 4.

  The MarianTokenizer written beside the model makes the pieces, `</s>` included;
  `translate_batch` keeps its defaults but for the beam, no length penalty and
  our output limits (random parameters run every output to its limit).
  """
  tokenizer = loading.require("transformers").MarianTokenizer.from_pretrained(directory)
  translator = ctranslate2.Translator(str(directory), device="cpu", compute_type="float32")
  sources = [tokenizer.convert_ids_to_tokens(tokenizer.encode(line)) for line in lines]
  agree = sum(tokenizer.convert_tokens_to_ids(s) == i for s, i in zip(sources, ids))
  print(f"CTranslate2 float32 called as documented (MarianTokenizer pieces with </s>; "
        f"{agree}/{len(ids)} sources tokenised as ours), translations identical to ours:")
  limits = exported_search.output_limits(cfg, ids)
  for beam_size in (1, 4):
    ours = sentence_batches.decode_ids(cfg, params, [i[:-1] for i in ids], beam_size=beam_size,
                                       alpha=0.0)
    theirs = [None] * len(ids)
    for limit, group in exported_search.batches(limits, 64):
      results = translator.translate_batch([sources[i] for i in group], beam_size=beam_size,
                                           length_penalty=0.0, max_decoding_length=limit)
      for i, r in zip(group, results):
        theirs[i] = tokenizer.convert_tokens_to_ids(r.hypotheses[0])
    same = sum(a == b for a, b in zip(ours, theirs))
    print(f"  {'greedy' if beam_size == 1 else f'beam {beam_size}':8} {same:5d} / {len(ids)}")


if __name__ == "__main__":
  main()
