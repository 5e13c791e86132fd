"""A package, so that a kernel's tests (tests/kernels/test_attention.py, test_dropout.py) and the
model's modules' (tests/model/test_attention.py, ...) may share a file name: pytest imports these
as kernels.test_*."""
