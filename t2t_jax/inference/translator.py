"""Text in, text out with trained models: the library behind `t2t-translate` and evaluation.

    translator = Translator("runs/demo")             # config, tokenizer, averaged params
    translator.translate(["the dog sleeps"])          # -> ["der Hund schläft"]
    for t in translator.translate_stream(open("news.en"), n_best=4, alignments=True):
      t.index, [(h.text, h.score, h.alignment) for h in t.hypotheses]
    Translator("runs/a", ensemble=["runs/b", "runs/c/checkpoints/90000"])   # decoded together
    translator.translate_stream(lines, sample=True, top_k=10, seed=1)       # back-translation
    Translator.from_params(cfg, params, tokenizer)    # a model in memory, no work directory
    translator.score(sources, targets)                # each pair's log-probability (scoring.py)

A model is a work directory (its averaged params when present, else its latest
checkpoint's; `average=False`: the latest) or one of its checkpoints,
`WORKDIR/checkpoints/<step>` or `WORKDIR/averaged/<step>`. Models of an
ensemble must share the vocabulary (the same `vocab/spm.model`); their
probabilities are averaged at every step (`decoding/batch_decoder.py`).

Every input line gives exactly one translation, in input order: a blank line
gives "", and a line longer than the model's `max_len` positions is split at
sentence-like boundaries and its parts' translations joined, with a warning
naming the line (`long_inputs="crop"`: cut to fit; "fail": a ValueError;
inference/long_inputs.py). Lines are decoded `window` at a time in
batches of similar length (`inference/streaming.py`), so `translate_stream` handles
input of any length in bounded memory (`grouped=True`: each group of lines that
arrived together as soon as it is read, for a terminal or a pipe:
`textio.iter_arrived`); `translate` holds the whole list and sorts it at once.
`Translator` is the one way to translate from Python: the modules below it
(inference/streaming.py, decoding/) are its parts.
"""

from __future__ import annotations

import logging
import os
import pathlib
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import numpy as np

from t2t_jax import configs
from t2t_jax.inference import shortlist as shortlist_lib
from t2t_jax.data import vocab
from t2t_jax.decoding import batch_decoder
from t2t_jax.decoding import sentence_batches
from t2t_jax.ids import bucket_length
from t2t_jax.inference import long_inputs as long_inputs_lib
from t2t_jax.inference import scoring
from t2t_jax.inference import streaming
from t2t_jax.quantization import quantized
from t2t_jax.runtime import averaging
from t2t_jax.inference import stored_programs
from t2t_jax.runtime import workdir as workdir_lib

log = logging.getLogger(__name__)

Params = Any


def load_tokenizer(workdir: str | os.PathLike) -> vocab.Tokenizer:
  """The SentencePiece model a work directory was trained with (`vocab/spm.model`), and its
  target side's where that has its own (an imported model's `vocab/target.model`)."""
  path = pathlib.Path(workdir) / "vocab" / "spm.model"
  if not path.is_file():
    raise FileNotFoundError(f"{path} not found: {workdir_lib.TRAIN_FIRST}")
  return vocab.Tokenizer(str(path), vocab.target_model(path.parent))


def load_model(path: str | os.PathLike, average: bool = True, **overrides: Any
               ) -> tuple[configs.TransformerConfig, batch_decoder.Member, vocab.Tokenizer]:
  """A work directory's or one checkpoint's run config, model and the tokenizer it was trained with.

  The model is a `batch_decoder.Member` (the config's `.model` and the params); the
  run config gives the decoding defaults. `overrides`: config fields to change
  for decoding, e.g. beam_size=1, or quantization="int8" (the params quantised
  here, once); dtype="bfloat16" (or a config trained so) decodes as
  quantization="bfloat16" (`decoding_config`).
  """
  workdir = averaging.checkpoint_workdir(path) or pathlib.Path(path)
  if not workdir.is_dir():
    raise FileNotFoundError(f"work directory {workdir} does not exist: {workdir_lib.TRAIN_FIRST}")
  cfg = decoding_config(workdir_lib.load_config(workdir).replace(**overrides))
  tokenizer = load_tokenizer(workdir)
  if averaging.checkpoint_workdir(path) is not None:
    params = averaging.load_checkpoint_params(path)
  else:
    params = averaging.load_params(workdir, averaged=average)
  return cfg, batch_decoder.Member(cfg.model, _member_params(cfg, params)), tokenizer


def decoding_config(cfg: configs.TransformerConfig) -> configs.TransformerConfig:
  """The config a model decodes with: a bfloat16 one (`dtype="bfloat16"`) as
  `quantization="bfloat16"`, its weights cast to bfloat16 once at load and everything but
  the products float32 (quantization/quantized.py); any other as it is."""
  if cfg.dtype == "bfloat16" and cfg.quantization is None:
    return cfg.replace(dtype="float32", quantization="bfloat16")
  return cfg


def _member_params(cfg: configs.TransformerConfig, params: Params) -> Params:
  """A trained model's float32 params as the model `cfg` decodes with them: quantised
  once where `cfg.quantization` asks (quantization/quantized.py), else as they are."""
  if cfg.quantization is None:
    return params
  return quantized.quantize_params(cfg.model, params)


def _check_same_vocabulary(first: str, tokenizer: vocab.Tokenizer, cfg: configs.TransformerConfig,
                           path: str, other: vocab.Tokenizer,
                           other_cfg: configs.TransformerConfig) -> None:
  proto = lambda t: (t.sp.serialized_model_proto(), t.target_sp.serialized_model_proto())
  same = proto(tokenizer) == proto(other)
  sizes = lambda c: (c.vocab_size, c.target_vocab)
  if not same or sizes(cfg) != sizes(other_cfg):
    raise ValueError(
        f"{path} was trained with another vocabulary than {first} (its SentencePiece models "
        f"{'are the same' if same else 'differ'}, vocabulary sizes (source, target) "
        f"{sizes(other_cfg)} vs {sizes(cfg)}): the models of an ensemble must share their "
        "vocabularies")


class Translator:
  """Trained models (one, or an ensemble) with their tokenizer, ready to translate lines.

  From a work directory or checkpoints (`Translator(workdir, ensemble=...)`) or
  from params in memory (`Translator.from_params(cfg, params, tokenizer)`).
  """

  def __init__(self, workdir: str | os.PathLike, average: bool = True,
               ensemble: Sequence[str | os.PathLike] = (), dtype: Optional[str] = None,
               int8: bool = False, programs: bool = False, shortlist: bool = False,
               **overrides: Any):
    """`workdir`: a work directory or a checkpoint in one; `ensemble`: more of them.

    `average`: a work directory's averaged params if present (else its latest
    checkpoint's). `dtype`: every model's compute dtype ("float32", "bfloat16";
    default: each config's); bfloat16 decodes with bfloat16 weights, cast once here,
    the products accumulating in float32 and the rest float32 (`decoding_config`). `int8`: every model decodes with int8 products
    (config quantization="int8": the Dense products and the output projection in
    int8 x int8 -> int32, the rest float32; translations may differ slightly from
    float32's). `overrides`: config fields to change for decoding,
    e.g. beam_size=1; the first model's config gives the decoding defaults.
    `programs`: compiled decoding programs are loaded from the work directory's
    `programs/` and what is compiled is stored there (`self.programs`,
    `programs_directory`; inference/stored_programs.py), else (the default)
    compiled in each process. `shortlist`: each batch's outputs are picked among
    the candidates of the work directory's lexical shortlist (inference/shortlist.py,
    built by `t2t-shortlist`), normalised over them.
    """
    same = {**({} if dtype is None else {"dtype": dtype}),
            **({"quantization": "int8"} if int8 else {})}
    self.cfg, first, tokenizer = load_model(workdir, average, **overrides, **same)
    members = [first]
    for path in ensemble:
      cfg, member, other = load_model(path, average, **same)
      _check_same_vocabulary(str(workdir), tokenizer, self.cfg, str(path), other, cfg)
      members.append(member)
    store = stored_programs.Store(programs_directory(workdir)) if programs else None
    self._hold(self.cfg, members, tokenizer, store)
    if shortlist:
      self.shortlist = shortlist_lib.workdir_table(
          averaging.checkpoint_workdir(workdir) or workdir, tokenizer)

  @classmethod
  def from_params(cls, cfg: configs.TransformerConfig, params: Params,
                  tokenizer: vocab.Tokenizer,
                  programs: Optional[stored_programs.Store] = None) -> "Translator":
    """One model already in memory (no work directory), e.g. a run's params after training
    (float32; quantised or cast here where `cfg` asks: `decoding_config`); `programs`: a store of
    compiled decoding programs to load from and add to."""
    translator = cls.__new__(cls)
    cfg = decoding_config(cfg)
    translator._hold(cfg, [batch_decoder.Member(cfg.model, _member_params(cfg, params))], tokenizer,
                     programs)
    return translator

  def _hold(self, cfg: configs.TransformerConfig, members: list[batch_decoder.Member],
            tokenizer: vocab.Tokenizer, programs: Optional[stored_programs.Store]) -> None:
    # The run config (not a member's model config) gives the decoding defaults.
    self.cfg, self.members, self.tokenizer = cfg, members, tokenizer
    self.params = members[0].params
    self.programs = programs
    self.shortlist: Optional[shortlist_lib.Shortlist] = None

  def translate(self, lines: Sequence[str], **settings: Any) -> list[str]:
    """The best translation of each line; `settings` as for `translate_stream`."""
    stream = self.translate_stream(lines, **{"window": max(len(lines), 1), **settings})
    return [t.text for t in stream]

  def translate_stream(self, lines: Iterable[str], *, n_best: int = 1,
                       alignments: bool | streaming.Alignments = False, sample: bool = False,
                       temperature: float = 1.0, top_k: int = 0, seed: int = 0,
                       beam_size: Optional[int] = None, alpha: Optional[float] = None,
                       max_decode_extra: Optional[int] = None, max_len_a: Optional[float] = None,
                       min_len: Optional[int] = None,
                       batch_size: Optional[int] = None, window: Optional[int] = None,
                       in_flight: int = sentence_batches.IN_FLIGHT,
                       long_inputs: str = long_inputs_lib.DEFAULT, grouped: bool = False,
                       warn: Callable[[str], None] = log.warning,
                       shape: Optional[streaming.Shape] = None) -> Iterator[streaming.Translation]:
    """One `streaming.Translation` per line as the lines arrive, in input order.

    n_best: hypotheses per line (beam search: at most beam_size; with
    `sample`: independent samples, drawn with temperature and top_k (0: the
    whole vocabulary), seeded by `seed` and the line's index). `alignments`:
    True or `streaming.Alignments(layer, head)` adds word alignments. Beam
    settings and `batch_size` default to the config's; an output has at most
    ceil(max_len_a x source) + max_decode_extra tokens (max_len_a default 1;
    `search.output_limits`) and at least `min_len` before EOS (default 1: never
    empty). `window` lines are held at once (default 16
    batches), `in_flight` batches of them decoding at once; `grouped`: `lines`
    yields lists of lines, each decoded as soon as it is read
    (`textio.iter_arrived`). `long_inputs`: "split" (default), "crop" or "fail"
    for lines longer than the model's limit (inference/long_inputs.py). `shape`: a
    batch's id rows from its sources (`streaming.stream`).
    """
    search = batch_decoder.Search.from_config(
        self.cfg, beam_size=beam_size, alpha=alpha, max_decode_extra=max_decode_extra,
        max_len_a=max_len_a, min_len=min_len, n_best=n_best, sample=sample, temperature=temperature,
        top_k=top_k, seed=seed)
    if alignments is True:
      alignments = streaming.Alignments()
    return streaming.stream(
        self.members, self.tokenizer, lines, search=search,
        batch_size=batch_size or self.cfg.decode_batch_size, window=window,
        alignments=alignments or None, in_flight=in_flight, long_inputs=long_inputs,
        grouped=grouped, warn=warn, shape=shape,
        store=self.programs, shortlist=self.shortlist)

  def score(self, sources: Sequence[str], targets: Sequence[str], per_token: bool = False,
            batch_size: Optional[int] = None) -> list[float] | list[np.ndarray]:
    """Each pair's log-probability under the models: the sum of the natural-log
    probabilities of the target's pieces and its EOS, teacher-forced, over the whole
    target vocabulary (whatever this translator's shortlist); `per_token`: each pair's
    per-piece log-probabilities [pieces + 1] instead (inference/scoring.py). Batches of
    `batch_size` pairs (default the config's decode_batch_size)."""
    source_ids, target_ids = scoring.encode_pairs(self.tokenizer, sources, targets)
    found = scoring.score_ids(self.members, source_ids, target_ids,
                              batch_size=batch_size or self.cfg.decode_batch_size)
    return found if per_token else [scoring.total(log_probs) for log_probs in found]

  def store_programs(self, rows: Optional[Sequence[int]] = None,
                     widths: Optional[Sequence[int]] = None) -> int:
    """Compiles (or loads) the beam programs t2t-translate decodes with by default into
    `self.programs`; returns how many programs.

    Batches of `rows` sentences (default: `decode_batch_size`, which every
    batch of a file but its last fills) of `widths` (default: every width the
    models take), with the config's search settings
    (`batch_decoder.compile_beam_programs`).
    """
    if self.programs is None:
      raise ValueError("this Translator keeps no programs: make it with programs=True")
    search = batch_decoder.Search.from_config(self.cfg)
    limit = batch_decoder.max_positions(self.members)
    widths = widths or sorted({min(bucket_length(n + 1), limit) for n in range(1, limit)})
    return sum(batch_decoder.compile_beam_programs(self.members, r, width, search, self.programs)
               for r in rows or [self.cfg.decode_batch_size] for width in widths)


def programs_directory(path: str | os.PathLike) -> pathlib.Path:
  """Where the compiled programs of a work directory (or of the one a checkpoint is in) are
  kept: WORKDIR/programs."""
  return (averaging.checkpoint_workdir(path) or pathlib.Path(path)) / stored_programs.DIRECTORY
