"""A small Marian model built here as OPUS-MT's are published: what `t2t-import --from marian` reads.

transformers' MarianMTModel with OPUS-MT's choices at a tiny size (swish, a random
final_logits_bias, Marian's ids: EOS 0, <unk> 1, padding last), two SentencePiece
models (English sources, German targets, each trained on its side of the demo corpus)
over one joint vocab.json, trained briefly in torch so that it ends its sentences,
and saved with `save_pretrained` beside its MarianTokenizer. The `marian_dir`
fixture (conftest.py) makes it once per session, in about 30 s on one CPU core.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np

from t2t_jax.corpora import demo

STEPS = 400
ROWS = 32


def sentences(count: int, seed: int) -> list[tuple[str, str]]:
  """Short demo pairs (3-6 words), English -> German-like."""
  return demo.generate(count, seed=seed, min_words=3, max_words=6)


def held_out(count: int) -> list[str]:
  """English sources from another seed than the training pairs'."""
  return [en for en, _ in sentences(count, seed=77)]


def _spm(path: pathlib.Path, lines: list[str], vocab_size: int):
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  path.with_suffix(".txt").write_text("\n".join(lines) + "\n")
  # As Marian's: SentencePiece's own ids (<unk> 0, <s> 1, </s> 2), a unigram model.
  spm.SentencePieceTrainer.Train(input=str(path.with_suffix(".txt")), model_prefix=str(path),
                                 vocab_size=vocab_size, character_coverage=1.0, minloglevel=2)
  path.with_suffix(".txt").unlink()
  return spm.SentencePieceProcessor(model_file=f"{path}.model")


def make(out: pathlib.Path) -> pathlib.Path:
  """Builds, trains and saves the model and its tokenizer in `out`; returns it."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  torch.manual_seed(0)
  torch.set_num_threads(1)
  pairs = sentences(3000, seed=0)
  work = out / "spm"
  work.mkdir(parents=True)
  source = _spm(work / "source", [en for en, _ in pairs], 200)
  target = _spm(work / "target", [de for _, de in pairs], 240)
  pieces = sorted({sp.id_to_piece(i) for sp in (source, target)
                   for i in range(3, sp.get_piece_size())})
  tokens = ["</s>", "<unk>"] + pieces + ["<pad>"]           # OPUS-MT's vocab.json layout
  (work / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
  tokenizer = transformers.MarianTokenizer(
      source_spm=str(work / "source.model"), target_spm=str(work / "target.model"),
      vocab=str(work / "vocab.json"), source_lang="en", target_lang="de")
  pad = len(tokens) - 1
  config = transformers.MarianConfig(
      vocab_size=len(tokens), decoder_vocab_size=len(tokens), d_model=64, encoder_layers=2,
      decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
      encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=128,
      activation_function="swish", dropout=0.0, attention_dropout=0.0, scale_embedding=True,
      share_encoder_decoder_embeddings=True, pad_token_id=pad, eos_token_id=0,
      decoder_start_token_id=pad, forced_eos_token_id=0, bad_words_ids=[[pad]])
  model = transformers.MarianMTModel(config)
  with torch.no_grad():   # a bias the model is trained around (the buffer itself is not trained)
    model.final_logits_bias.copy_(0.3 * torch.randn_like(model.final_logits_bias))
  batch = tokenizer([en for en, _ in pairs], text_target=[de for _, de in pairs],
                    padding=True, return_tensors="pt")
  labels = batch["labels"].masked_fill(batch["labels"] == pad, -100)
  optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
  rng = np.random.default_rng(0)
  model.train()
  for _ in range(STEPS):
    rows = torch.from_numpy(rng.choice(len(pairs), ROWS, replace=False))
    loss = model(input_ids=batch["input_ids"][rows], attention_mask=batch["attention_mask"][rows],
                 labels=labels[rows]).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
  print(f"trained the Marian model {STEPS} steps: loss {loss.item():.3f}")
  model.eval()
  model.save_pretrained(out)
  tokenizer.save_pretrained(out)
  shutil.rmtree(work)
  return out
