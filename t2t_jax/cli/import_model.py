"""`t2t-import`: a published model as a work directory that every command takes.

    t2t-import --from marian --model opus-mt-en-de --workdir runs/opus-en-de
    t2t-translate --workdir runs/opus-en-de < news.en

--model is a local directory as transformers' `save_pretrained` writes it for a
MarianMTModel and its MarianTokenizer (an OPUS-MT model: config.json, the weights,
source.spm, target.spm, vocab.json, target_vocab.json for separate vocabularies);
nothing is downloaded. Needs the export extras (`pip install -e .[export]`). The work
directory is then a run's like any other: t2t-translate, t2t-score, t2t-serve,
t2t-export, `t2t-train --finetune_from`, t2t-shortlist --train. A multilingual model's
language tokens are listed: each source starts with one (>>deu<< ...).
What is imported and how: docs/export.md; the library: t2t_jax/export/import_marian.py.
"""

from __future__ import annotations

from typing import Optional, Sequence

from t2t_jax import inference
from t2t_jax.cli import exits
from t2t_jax.cli import flags
from t2t_jax.export import import_marian

FORMATS = ("marian",)


@exits.command
def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = flags.parser("t2t-import", __doc__)
  parser.add_argument("--from", dest="format", required=True, choices=FORMATS,
                      help="the model's format: marian (transformers' MarianMTModel)")
  parser.add_argument("--model", required=True, help="the model's directory (save_pretrained's)")
  parser.add_argument("--workdir", required=True, help="the work directory to write (new)")
  args = parser.parse_args(argv)
  workdir = import_marian.import_marian(args.model, args.workdir)
  print(f"Imported {args.model} into {workdir}: t2t-translate --workdir {workdir}")
  languages = inference.load_tokenizer(workdir).language_tokens
  if languages:
    print(f"Its {len(languages)} target language tokens, one of which starts each source: "
          + " ".join(languages))


if __name__ == "__main__":
  main()
