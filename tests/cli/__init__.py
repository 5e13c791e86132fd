"""A package, so that a command's tests (tests/cli/test_bleu.py) and its library's
(tests/evaluation/test_bleu.py) may share a file name: pytest imports these as cli.test_*."""
