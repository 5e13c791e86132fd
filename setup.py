"""Installs t2t_jax with its console scripts; dependencies come from requirements.txt."""

import pathlib

import setuptools

_REQUIREMENTS = [
    line.strip() for line in pathlib.Path(__file__).with_name("requirements.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]

setuptools.setup(
    name="t2t_jax",
    version="0.1.0",
    description="The original Transformer (Vaswani et al. 2017) in JAX/Flax, for machine translation.",
    packages=setuptools.find_packages(include=["t2t_jax", "t2t_jax.*"]),
    python_requires=">=3.11",
    install_requires=_REQUIREMENTS,
    entry_points={
        "console_scripts": [
            "t2t-translate=t2t_jax.translate:main",
            "t2t-average-checkpoints=t2t_jax.checkpoint_cli:main",
        ],
    },
)
