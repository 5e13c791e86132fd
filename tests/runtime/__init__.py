"""A package, so that tests/runtime/test_extras.py (runtime/extras.py) and tests/test_extras.py
(the skip helper tests/extras.py) may share a file name: pytest imports these as runtime.test_*."""
