"""A package, so that a recipe's tests (tests/recipes/test_multi30k.py) and its data module's
(tests/corpora/test_multi30k.py) may share a file name: pytest imports these as recipes.test_*."""
