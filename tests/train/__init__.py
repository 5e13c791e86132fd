"""A package, so that the training metrics' tests (tests/train/test_metrics.py) and the server's
(tests/serve/test_metrics.py) may share a file name: pytest imports these as train.test_*."""
