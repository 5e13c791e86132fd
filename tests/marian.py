"""Small Marian models built here as OPUS-MT's are published: what `t2t-import --from marian` reads.

transformers' MarianMTModel with OPUS-MT's choices at a tiny size (a random
final_logits_bias, Marian's ids: EOS 0, <unk> 1, padding last), two SentencePiece
models (English sources, German targets, each trained on its side of the demo corpus),
trained briefly in torch so that it ends its sentences, and saved with `save_pretrained`
beside its MarianTokenizer and the generation settings OPUS-MT's hold. `make` builds
the first configuration below (swish, one joint vocab.json, 2 + 2 layers); `make_variant`
each of the others:

- "separate_vocabularies": a source vocab.json and a target_vocab.json of different
  sizes, the decoder's embedding tied to the output layer (share_encoder_decoder_embeddings
  false, as many OPUS-MT and Tatoeba models);
- "untied_output": one embedding for both stacks and an output layer of its own
  (tie_word_embeddings false, as the tc-big models): transformers 5 ties nothing then, so
  the stacks are made to share the matrix before training, and the weights file holds
  each stack's copy, as older transformers wrote it;
- "deep_encoder": 3 encoder layers and 1 decoder layer, relu, EOS, <unk> and padding the
  last ids (the tc-big vocabularies' layout);
- "multilingual": a target of two languages, each source prefixed with >>deu<< or
  >>nld<< (tokens of vocab.json, not of the SentencePiece models, as opus-mt-en-mul's);
  the "nld" targets are the German ones after "Ja,".
Each has 512 positions. The fixtures (conftest.py) make each once per session: the
first in about 20 s on one CPU core, each variant in a few seconds.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np

from t2t_jax.corpora import demo

STEPS = 400
ROWS = 32
LANGUAGES = (">>deu<<", ">>nld<<")

# The first model's settings, then each variant's changes (sizes, layout, training).
BASE = dict(d_model=64, layers=(2, 2), heads=4, ffn=128, positions=128, activation="swish",
            source_pieces=200, target_pieces=240, steps=STEPS, rows=ROWS, lr=3e-3,
            share=True, tie=True, separate=False, special_last=False, languages=False)
_SMALL = dict(d_model=32, heads=2, ffn=64, positions=512, steps=250, lr=5e-3)
VARIANTS = {
    # The target's smaller: MarianConfig's one pad_token_id, the target's last id, must be a
    # row of the source embedding too (torch's padding_idx).
    "separate_vocabularies": dict(_SMALL, share=False, separate=True,
                                  source_pieces=230, target_pieces=150),
    "untied_output": dict(_SMALL, tie=False),
    "deep_encoder": dict(_SMALL, layers=(3, 1), activation="relu", special_last=True),
    "multilingual": dict(_SMALL, languages=True),
}


def sentences(count: int, seed: int) -> list[tuple[str, str]]:
  """Short demo pairs (3-6 words), English -> German-like."""
  return demo.generate(count, seed=seed, min_words=3, max_words=6)


def held_out(count: int) -> list[str]:
  """English sources from another seed than the training pairs'."""
  return [en for en, _ in sentences(count, seed=77)]


def pairs(variant: str, count: int, seed: int) -> list[tuple[str, str]]:
  """`variant`'s text pairs: the multilingual model's alternate its two target languages."""
  if not VARIANTS.get(variant, {}).get("languages"):
    return sentences(count, seed)
  return [(f"{LANGUAGES[k % 2]} {en}", de if k % 2 == 0 else f"Ja, {de}")
          for k, (en, de) in enumerate(sentences(count, seed))]


def held_out_pairs(variant: str, count: int) -> list[tuple[str, str]]:
  return pairs(variant, count, seed=77)


def _spm(path: pathlib.Path, lines: list[str], vocab_size: int):
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  path.with_suffix(".txt").write_text("\n".join(lines) + "\n")
  # As Marian's: SentencePiece's own ids (<unk> 0, <s> 1, </s> 2), a unigram model.
  spm.SentencePieceTrainer.Train(input=str(path.with_suffix(".txt")), model_prefix=str(path),
                                 vocab_size=vocab_size, character_coverage=1.0, minloglevel=2)
  path.with_suffix(".txt").unlink()
  return spm.SentencePieceProcessor(model_file=f"{path}.model")


def _vocabulary(work: pathlib.Path, name: str, models, settings: dict) -> list[str]:
  """A vocab.json over the pieces of `models` (Marian's layout); returns its tokens by id."""
  pieces = sorted({sp.id_to_piece(i) for sp in models for i in range(3, sp.get_piece_size())})
  if settings["languages"] and name == "vocab.json":
    pieces += list(LANGUAGES)
  tokens = (pieces + ["</s>", "<unk>", "<pad>"] if settings["special_last"]
            else ["</s>", "<unk>"] + pieces + ["<pad>"])          # OPUS-MT's vocab.json layout
  (work / name).write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
  return tokens


def make(out: pathlib.Path) -> pathlib.Path:
  """Builds, trains and saves the first model and its tokenizer in `out`; returns it."""
  return _build(out, BASE, sentences(3000, seed=0))


def make_variant(out: pathlib.Path, variant: str) -> pathlib.Path:
  """`make` for one of `VARIANTS`."""
  return _build(out, {**BASE, **VARIANTS[variant]}, pairs(variant, 3000, seed=0))


def _build(out: pathlib.Path, settings: dict, text: list[tuple[str, str]]) -> pathlib.Path:
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  torch.manual_seed(0)
  torch.set_num_threads(1)
  work = out / "spm"
  work.mkdir(parents=True)
  source = _spm(work / "source", [en.split(" ", 1)[1] if settings["languages"] else en
                                  for en, _ in text], settings["source_pieces"])
  target = _spm(work / "target", [de for _, de in text], settings["target_pieces"])
  separate = settings["separate"]
  tokens = _vocabulary(work, "vocab.json", (source,) if separate else (source, target), settings)
  target_tokens = _vocabulary(work, "target_vocab.json", (target,), settings) if separate else tokens
  tokenizer = transformers.MarianTokenizer(
      source_spm=str(work / "source.model"), target_spm=str(work / "target.model"),
      vocab=str(work / "vocab.json"), source_lang="en", target_lang="de",
      separate_vocabs=separate,
      target_vocab_file=str(work / "target_vocab.json") if separate else None)
  # The config's ids are the target side's: the decoder's start (padding) and EOS.
  pad, eos = target_tokens.index("<pad>"), target_tokens.index("</s>")
  encoder_layers, decoder_layers = settings["layers"]
  config = transformers.MarianConfig(
      vocab_size=len(tokens), decoder_vocab_size=len(target_tokens), d_model=settings["d_model"],
      encoder_layers=encoder_layers, decoder_layers=decoder_layers,
      encoder_attention_heads=settings["heads"], decoder_attention_heads=settings["heads"],
      encoder_ffn_dim=settings["ffn"], decoder_ffn_dim=settings["ffn"],
      max_position_embeddings=settings["positions"], activation_function=settings["activation"],
      dropout=0.0, attention_dropout=0.0, scale_embedding=True,
      share_encoder_decoder_embeddings=settings["share"], tie_word_embeddings=settings["tie"],
      pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=pad, forced_eos_token_id=eos)
  model = transformers.MarianMTModel(config)
  if settings["share"] and not settings["tie"]:   # one matrix for both stacks, as Marian's
    model.model.encoder.embed_tokens = model.model.decoder.embed_tokens = model.model.shared
  with torch.no_grad():   # a bias the model is trained around (the buffer itself is not trained)
    model.final_logits_bias.copy_(0.3 * torch.randn_like(model.final_logits_bias))
  _train(torch, model, tokenizer, text, settings, pad)
  model.eval()
  # OPUS-MT's generation settings (their generation_config.json).
  model.generation_config = transformers.GenerationConfig(
      num_beams=4, max_length=512, bad_words_ids=[[pad]], forced_eos_token_id=eos,
      pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=pad)
  model.save_pretrained(out)
  if settings["share"] and not settings["tie"]:
    _with_each_stacks_copy(out, model)
  tokenizer.save_pretrained(out)
  shutil.rmtree(work)
  return out


def _train(torch, model, tokenizer, text, settings: dict, pad: int) -> None:
  sources = tokenizer([en for en, _ in text])["input_ids"]
  targets = tokenizer(text_target=[de for _, de in text])["input_ids"]
  padded = lambda rows, fill: torch.tensor([row + [fill] * (max(map(len, rows)) - len(row))
                                            for row in rows])
  source_pad = tokenizer.convert_tokens_to_ids("<pad>")
  inputs, labels = padded(sources, source_pad), padded(targets, -100)
  mask = padded([[1] * len(row) for row in sources], 0)
  optimizer = torch.optim.Adam(model.parameters(), lr=settings["lr"])
  rng = np.random.default_rng(0)
  model.train()
  for _ in range(settings["steps"]):
    rows = torch.from_numpy(rng.choice(len(text), settings["rows"], replace=False))
    loss = model(input_ids=inputs[rows], attention_mask=mask[rows], labels=labels[rows]).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
  print(f"trained the Marian model {settings['steps']} steps: loss {loss.item():.3f}")


def _with_each_stacks_copy(out: pathlib.Path, model) -> None:
  """model.safetensors with the shared matrix under each stack's name too, as older
  transformers wrote a tied matrix (transformers 5 writes one copy, and reads a model of
  tie_word_embeddings false back with the stacks' embeddings missing)."""
  import safetensors.numpy  # pylint: disable=import-outside-toplevel
  path = out / "model.safetensors"
  state = safetensors.numpy.load_file(str(path))
  shared = model.model.shared.weight.detach().numpy()
  for stack in ("encoder", "decoder"):
    state[f"model.{stack}.embed_tokens.weight"] = shared
  safetensors.numpy.save_file(state, str(path), metadata={"format": "pt"})
