"""A package, so that tests/export/test_engines.py and tests/serve/test_engines.py may share a
file name: pytest imports these as export.test_*."""
