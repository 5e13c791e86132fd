"""Installs t2t_jax with its console scripts.

Dependencies come from requirements.txt; the `export` extra (t2t-export, the
comparison with transformers and CTranslate2) from requirements-export.txt.
"""

import pathlib

import setuptools


def _requirements(name: str) -> list[str]:
  lines = pathlib.Path(__file__).with_name(name).read_text().splitlines()
  return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


setuptools.setup(
    name="t2t_jax",
    version="0.1.0",
    description="The original Transformer (Vaswani et al. 2017) in JAX/Flax, for machine translation.",
    packages=setuptools.find_packages(include=["t2t_jax", "t2t_jax.*"]),
    python_requires=">=3.11",
    install_requires=_requirements("requirements.txt"),
    extras_require={"export": _requirements("requirements-export.txt")},
    entry_points={
        "console_scripts": [
            "t2t-translate=t2t_jax.cli.translate:main",
            "t2t-average-checkpoints=t2t_jax.cli.average:main",
            "t2t-export=t2t_jax.cli.export:main",
        ],
    },
)
