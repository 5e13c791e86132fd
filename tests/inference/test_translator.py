"""The one Python way to translate: a translator from params in memory is the work directory's."""

from t2t_jax import inference


def test_from_params_translates_as_the_work_directory_does(trained_workdir):
  loaded = inference.Translator(trained_workdir)
  held = inference.Translator.from_params(loaded.cfg, loaded.params, loaded.tokenizer)
  lines = ["the small dog sleeps", "", "the old man sees the house"]
  expected = loaded.translate(lines)
  assert expected[1] == "" and all(expected[::2])
  assert held.translate(lines) == expected
  assert held.members[0].cfg == loaded.cfg.model and len(held.members) == 1
