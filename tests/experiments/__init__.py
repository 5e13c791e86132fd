"""A package, so that an experiment's tests (tests/experiments/test_multi30k.py) and its modules
(tests/corpora/test_multi30k.py, tests/recipes/test_table3.py) may share a file name: pytest imports
these as experiments.test_*."""
