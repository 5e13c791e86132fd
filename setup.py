"""Installs t2t_jax with its console scripts.

The package needs requirements-core.txt, as ranges of the tested versions, so that it
installs into an environment's own JAX without replacing it. Each extra has a file of
its own: `wmt` (requirements-wmt.txt: the WMT14 data through tensorflow-datasets, the
paper's tokenised BLEU, TensorBoard events), `notebook` (requirements-notebook.txt),
`test` (requirements-test.txt), `export` (requirements-export.txt: t2t-export, the
comparison with transformers and CTranslate2), `serve` (requirements-serve.txt:
t2t-serve and its browser test) and `accelerators` (requirements-accelerators.txt: the
CUDA and TPU compilers t2t-compile uses, no device needed). requirements.txt pins the
exact tested versions of core, wmt, notebook and test, per Python version, for the
README's two commands.
"""

import pathlib

import setuptools


def _requirements(name: str) -> list[str]:
  lines = pathlib.Path(__file__).with_name(name).read_text().splitlines()
  specs = [line.split("#")[0].strip() for line in lines]
  return [spec for spec in specs if spec and not spec.startswith("-r")]


setuptools.setup(
    name="t2t_jax",
    version="0.1.0",
    description="The original Transformer (Vaswani et al. 2017) in JAX/Flax, for machine translation.",
    packages=setuptools.find_packages(include=["t2t_jax", "t2t_jax.*"]),
    python_requires=">=3.11",
    install_requires=_requirements("requirements-core.txt"),
    extras_require={extra: _requirements(f"requirements-{extra}.txt")
                    for extra in ("wmt", "notebook", "test", "export", "serve", "accelerators")},
    package_data={"t2t_jax.serve": ["static/*"]},  # the page t2t-serve serves
    entry_points={
        "console_scripts": [
            "t2t-train=t2t_jax.cli.train:main.console",
            "t2t-translate=t2t_jax.cli.translate:main.console",
            "t2t-average-checkpoints=t2t_jax.cli.average:main.console",
            "t2t-export=t2t_jax.cli.export:main.console",
            "t2t-compile=t2t_jax.cli.compile:main.console",
            "t2t-serve=t2t_jax.cli.serve:main.console",
            "t2t-shortlist=t2t_jax.cli.shortlist:main.console",
            "t2t-import=t2t_jax.cli.import_model:main.console",
            "t2t-score=t2t_jax.cli.score:main.console",
        ],
    },
)
