"""Three BLEU scores of a translation, each with a signature saying how it was computed.

- `sacrebleu`: detokenised text, cased, the 13a tokeniser (sacreBLEU's default);
  the number comparable across papers today.
- `sacrebleu_intl`: the same with sacreBLEU's `intl` tokeniser (splits all
  Unicode punctuation and symbols).
- `paper`: the way the paper's En-De numbers were computed (tensor2tensor's
  get_ende_bleu.sh), on both hypotheses and references:
    1. quotes normalised as Moses' replace-unicode-punctuation.perl and the
       script's own rule do: „ “ ” become " and ’ becomes ';
    2. Moses tokenisation (sacremoses, the target language's rules, no HTML
       escaping, no aggressive dash splitting);
    3. hyphenated compounds split, `rich-text` -> `rich ##AT##-##AT## text`
       (the script's `s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g`);
    4. BLEU as multi-bleu.perl defines it: cased, on the tokens as they are
       (sacreBLEU with tokenize="none" and no smoothing).

`bleu_scores` computes the three with their signatures (the command
`python -m t2t_jax.cli.bleu bleu` prints them for two files: cli/bleu.py);
`decode_and_score` translates a test set with a model's params and scores it.
Without sacremoses (a plain JAX GPU host may lack it) the `paper` score is
None, its signature saying why, and the two sacreBLEU scores stand: a long
training run never fails at its end for want of a tokeniser.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from typing import Any, Optional, Sequence

import sacrebleu

from t2t_jax.evaluation import text

log = logging.getLogger(__name__)
NO_SACREMOSES = ("not computed: sacremoses is not installed (pip install sacremoses, or bring "
                 "its wheel: README \"Measuring on a GPU host\")")

# What replace-unicode-punctuation.perl does to quotes, plus get_ende_bleu.sh's „ rule.
_QUOTES = str.maketrans({"„": '"', "“": '"', "”": '"', "’": "'"})
# Non-overlapping like the perl substitution: "a-b-c" -> "a ##AT##-##AT## b-c".
_COMPOUND = re.compile(r"(\S)-(\S)")


def _sacremoses() -> Any:
  """The sacremoses module, or None where it is not installed."""
  try:
    import sacremoses  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None
  return sacremoses


@functools.lru_cache(maxsize=None)
def _moses(lang: str) -> Any:
  return _sacremoses().MosesTokenizer(lang=lang)


def paper_tokenize(line: str, lang: str) -> str:
  """One line as the paper's BLEU script sees it: quotes, Moses tokens, ##AT## compounds."""
  tokens = _moses(lang).tokenize(line.translate(_QUOTES), escape=False, return_str=True)
  return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", tokens)


def _paper_signature(lang: str) -> str:
  return (f"nrefs:1|case:mixed|eff:no|tok:moses-{lang}+atat|quotes:t2t|smooth:none|"
          f"bleu:multi-bleu|sacremoses:{_sacremoses().__version__}|version:{sacrebleu.__version__}")


def _score(bleu: sacrebleu.metrics.BLEU, hyps: Sequence[str], refs: Sequence[str],
           signature: Optional[str] = None) -> dict[str, Any]:
  result = bleu.corpus_score(list(hyps), [list(refs)])
  return {"score": result.score, "signature": signature or str(bleu.get_signature()),
          "details": result.format(score_only=False)}


def bleu_scores(hyps: Sequence[str], refs: Sequence[str], lang: str) -> dict[str, dict[str, Any]]:
  """{"sacrebleu", "sacrebleu_intl", "paper"} -> {"score", "signature", "details"}.

  `hyps` and `refs` are detokenised lines, one reference per hypothesis; `lang`
  is the target language (Moses' rules for the paper score).
  """
  if len(hyps) != len(refs):
    raise ValueError(f"{len(hyps)} hypothesis lines but {len(refs)} reference lines; "
                     "they must pair up one to one")
  scores = {
      "sacrebleu": _score(sacrebleu.metrics.BLEU(tokenize="13a"), hyps, refs),
      "sacrebleu_intl": _score(sacrebleu.metrics.BLEU(tokenize="intl"), hyps, refs),
  }
  if _sacremoses() is None:
    log.warning("paper-style BLEU %s", NO_SACREMOSES)
    return {**scores, "paper": {"score": None, "signature": NO_SACREMOSES, "details": None}}
  paper_hyps = [paper_tokenize(line, lang) for line in hyps]
  paper_refs = [paper_tokenize(line, lang) for line in refs]
  paper = _score(sacrebleu.metrics.BLEU(tokenize="none", smooth_method="none", force=True),
                 paper_hyps, paper_refs, _paper_signature(lang))
  return {**scores, "paper": paper}


def decode_and_score(cfg, params: Any, tokenizer, sources: Sequence[str], references: Sequence[str],
                     out_path: Optional[str | os.PathLike], **settings: Any) -> dict[str, Any]:
  """Translates `sources` with `params`, writes the hypotheses to `out_path`, scores them.

  `out_path` None: the hypotheses are not written (the other processes of a
  multi-process run). `settings` go to `text.translate_lines` (beam_size, alpha,
  max_decode_extra, batch_size, ...; the config's by default). Returns
  `bleu_scores(...)` plus "decode": sentences, seconds and the hypothesis path.
  """
  if len(sources) != len(references):
    raise ValueError(f"{len(sources)} source lines but {len(references)} reference lines")
  start = time.time()
  hyps = text.translate_lines(cfg, params, tokenizer, sources, **settings)
  seconds = time.time() - start
  if out_path is not None:
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
      f.writelines(line + "\n" for line in hyps)
  scores = bleu_scores(hyps, references, cfg.target_lang)
  scores["decode"] = {"sentences": len(hyps), "seconds": round(seconds, 1),
                      "hypotheses": None if out_path is None else str(out_path)}
  return scores
