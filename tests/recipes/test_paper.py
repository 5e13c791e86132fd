"""recipes/paper.py: the paper's figures as it prints them (the presets held to them:
tests/test_configs.py)."""

from t2t_jax.recipes import paper


def test_the_papers_settings_as_stated():
  # The figures themselves, as the paper prints them (paper.py must not drift either).
  assert paper.settings("base") == {
      "num_layers": 6, "d_model": 512, "d_ff": 2048, "num_heads": 8, "d_k": 64, "d_v": 64,
      "dropout_rate": 0.1, "label_smoothing": 0.1, "num_train_steps": 100_000,
      "positional_encoding": "sinusoidal", "adam_b1": 0.9, "adam_b2": 0.98, "adam_eps": 1e-9,
      "warmup_steps": 4000, "beam_size": 4, "alpha": 0.6, "max_decode_extra": 50,
      "vocab_size": 37000, "target_lang": "de", "tokens_per_batch": 25000,
      "checkpoint_every_minutes": 10, "average_last": 5}
  big = paper.settings("big")
  assert (big["num_layers"], big["d_model"], big["d_ff"], big["num_heads"]) == (6, 1024, 4096, 16)
  assert (big["dropout_rate"], big["num_train_steps"], big["average_last"]) == (0.3, 300_000, 20)
  assert paper.settings("big_enfr")["dropout_rate"] == 0.1
  assert paper.settings("base_enfr")["vocab_size"] == 32000

