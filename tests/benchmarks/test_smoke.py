"""Every script in benchmarks/ runs to its end at a toy size, so that none breaks unseen.

Each script's `main` runs in this process (`runpy`, its own `__main__`) with the
arguments of `SMOKE`, a tiny setting of its own flags; the test fails if it
raises or exits non-zero, or if its output lacks the line that shows it got
through, or if the `check` of a script that writes files fails. A script added
to benchmarks/ without an entry here fails `test_every_script_has_a_smoke_run`.
Scripts that need an extra skip naming its install command (tests/extras.py).
The figures they print at these sizes mean nothing; nothing here times anything.
"""

from __future__ import annotations

import json
import os
import pathlib
import runpy
import shutil
import sys

import pytest

from t2t_jax.accelerators import targets

import extras as extras_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _gpu_figures(tmp: pathlib.Path) -> None:
  """gpu_measure.py's toy run: every part wrote its figures, and the loss fell."""
  records = [json.loads(line) for line in (tmp / "figures" / "figures.jsonl").open()]
  by_part = {r["part"]: r for r in records}
  keys = {
      "environment": {"jax", "jaxlib", "packages", "python", "date", "git_commit", "driver",
                      "device_kind", "devices", "memory_bytes"},
      "measure_base": {"step_s", "tokens_per_s", "mfu", "peak_bytes", "predicted",
                       "measured_over_predicted", "decode"},
      "train": {"first_loss", "last_loss", "steps_per_s", "tokens_per_s", "curve"},
      "parallelism": {"step_s", "tokens_per_s", "pmap_step_s", "shard_map_over_pmap"},
      "decode": {"sentences", "beam_size", "sentences_per_s", "target_tokens_per_s"},
  }
  keys["measure_big"] = keys["measure_base"]
  assert [r for r in records if "error" in r or "skipped" in r] == []
  for part, expected in keys.items():
    assert expected <= set(by_part.get(part, {})), f"{part}: {by_part.get(part)}"
  assert [o["status"] for o in by_part["run"]["outcomes"]] == ["ok"] * len(keys)
  assert (by_part["measure_base"]["preset"], by_part["measure_big"]["preset"]) == ("base", "big")
  train = by_part["train"]
  losses = [loss for _, loss, _ in train["curve"]]
  assert train["steps"] == 30 and len(losses) == 3
  assert losses[0] == train["first_loss"] and losses[-1] == train["last_loss"]
  assert train["loss_fell"] and losses[-1] < losses[0]
  parallel = by_part["parallelism"]
  assert parallel["parallelism"] == "shard_map" and by_part["measure_base"]["parallelism"] == "pmap"
  assert parallel["pmap_step_s"] == by_part["measure_base"]["step_s"]
  # Scratch files (the training run's work directory) are gone; the logs stay.
  assert sorted(p.name for p in (tmp / "figures").iterdir()) == ["figures.jsonl", "logs"]


# A trained work directory (the `trained_workdir` fixture) with a demo-style test
# set, as the scripts that translate one expect: "{workdir}" is replaced by it.
# needs: the extra whose libraries it imports (tests/extras.py), "cuda": the CUDA compiler,
# "flax_wmt": a checkout of Flax's examples/wmt named by $FLAX_WMT (bench_decode's default).
TINY_DECODE = ["--configs=demo", "--smoke", "--sentences=2", "--source_len=6", "--output_len=4",
               "--extra=4", "--repeats=1"]
SMOKE = {
    "bench_data.py": dict(args=["--workdir={tmp}", "--batches=3", "--devices=1",
                                "--train_pairs=400"], expect="the pipeline delivers"),
    "bench_decode.py": dict(args=["random", *TINY_DECODE, "--uncached"],
                            expect="cached and uncached tokens identical"),
    "bench_decode.py testset": dict(args=["testset", "--workdir={workdir}", "--repeats=1"],
                                    expect="BLEU"),
    "bench_decode.py --compare": dict(args=["random", *TINY_DECODE, f"--compare={ROOT}",
                                            "--rounds=1"], expect="tokens identical"),
    "bench_decode.py --flax_wmt": dict(args=["random", *TINY_DECODE],
                                       expect="the Flax WMT example's beam search",
                                       needs="flax_wmt"),
    "bench_decode.py --ctranslate2": dict(args=["--ctranslate2", *TINY_DECODE],
                                          expect="ours (JAX, int8) / CTranslate2 int8, speed",
                                          needs="export"),
    "bench_decode.py --ctranslate2 --shortlist": dict(
        args=["--ctranslate2", "--shortlist", *TINY_DECODE],
        expect="ours int8 + shortlist / CTranslate2 int8 + vmap",
        needs="export"),
    "bench_decode.py --ctranslate2 --marian": dict(
        args=["--ctranslate2", "--marian", *TINY_DECODE],
        expect="ours (JAX, bfloat16) / CTranslate2 int8, speed", needs="export"),
    "bench_memory.py": dict(args=["--configs=demo", "--tokens=128", "--length=16"],
                            expect="| demo | float32 | 128 |"),
    "bench_serve.py": dict(args=["--workdir={workdir}", "--lines=3", "--clients=2", "--group=2",
                                 "--engines=jax", "--overload_clients=2",
                                 "--overload_requests=1"], expect='"overload"', needs="serve"),
    "bench_train.py": dict(args=["--configs=demo", "--tokens_per_device=64", "--length=16",
                                 "--steps=1"], expect="demo"),
    "compiled_choices.py": dict(args=["--targets=h100", "--smoke", "--choices=decode,topk"],
                                expect="top-k 8 of", needs="cuda"),
    # int8 and bfloat16 take every branch of the script (float32 takes bfloat16's).
    "decode_breakdown.py": dict(args=["--smoke", "--sentences=2", "--output_len=4", "--repeats=1",
                                      "--dtype=int8,bfloat16"],
                                expect="measured: 2 models x 2 output sizes"),
    "export_agreement.py": dict(args=["--workdir={workdir}", "--sentences=3"],
                                expect="CTranslate2", needs="export"),
    "fault_injection.py": dict(args=["--kills=1", "--signals=KILL", "--faults=", "--steps=10",
                                     "--workdir={tmp}"], expect="survived 1/1 kills"),
    "gpu_measure.py": dict(args=["{tmp}/figures", "--toy", "--device=cpu"],
                           expect="6 of 6 parts measured", check=_gpu_figures),
    "mfu_breakdown.py": dict(args=["--target=h100", "--presets=base", "--rows=2", "--smoke"],
                             expect="whole step", needs="cuda"),
}


def test_every_script_has_a_smoke_run():
  scripts = {p.name for p in BENCHMARKS.glob("*.py")}
  covered = {name.split()[0] for name in SMOKE}
  assert scripts - covered == set(), (
      f"benchmarks/{sorted(scripts - covered)} have no smoke run: add a tiny setting to SMOKE "
      "in tests/benchmarks/test_smoke.py")
  assert covered - scripts == set(), f"SMOKE names scripts that are gone: {covered - scripts}"


def _skip_without(need: str | None) -> None:
  if need == "flax_wmt" and not os.environ.get("FLAX_WMT"):
    pytest.skip("needs Flax's examples/wmt: git clone https://github.com/google/flax and set "
                "FLAX_WMT=flax/examples/wmt")
  if need == "cuda":
    extras_lib.skip_if_missing("accelerators", targets.COMPILER_PACKAGES["cuda"])
  elif need in extras_lib.MODULES:
    extras_lib.skip_if_missing(need)


@pytest.fixture(scope="module")
def demo_workdir(trained_workdir, tmp_path_factory):
  """The trained work directory with a few held-out lines as its demo test set."""
  from t2t_jax.corpora import demo  # pylint: disable=import-outside-toplevel
  workdir = tmp_path_factory.mktemp("bench") / "workdir"
  shutil.copytree(trained_workdir, workdir)
  data = workdir / "data" / "demo"
  data.mkdir(parents=True)
  pairs = demo.generate(4, seed=99, max_words=6)
  for side, lang in enumerate(("en", "de")):
    (data / f"test.{lang}").write_text("".join(p[side] + "\n" for p in pairs))
  return workdir


@pytest.mark.parametrize("name", sorted(SMOKE))
def test_script_runs(name, request, tmp_path, capfd, monkeypatch):
  setting = SMOKE[name]
  _skip_without(setting.get("needs"))
  values = {"tmp": str(tmp_path / "work")}
  if any("{workdir}" in a for a in setting["args"]):
    values["workdir"] = str(request.getfixturevalue("demo_workdir"))
  args = [a.format(**values) for a in setting["args"]]
  script = BENCHMARKS / name.split()[0]
  monkeypatch.setattr(sys, "argv", [str(script), *args])
  monkeypatch.setenv("PYTHONPATH", str(ROOT))
  monkeypatch.chdir(ROOT)
  try:
    runpy.run_path(str(script), run_name="__main__")
  except SystemExit as stop:
    assert stop.code in (0, None), f"{name} {' '.join(args)} exited with {stop.code}"
  out = capfd.readouterr().out
  assert setting["expect"] in out, f"{name} {' '.join(args)} printed:\n{out[-3000:]}"
  if "check" in setting:
    setting["check"](pathlib.Path(values["tmp"]))
