"""read_failures.py: only evidence about the files counts as damage."""

import errno
import json

import pytest

from t2t_jax.runtime import read_failures


@pytest.mark.parametrize("error, kind", [
    (FileNotFoundError(errno.ENOENT, "No such file"), read_failures.DAMAGED),
    (json.JSONDecodeError("Expecting value", "{", 1), read_failures.DAMAGED),
    (UnicodeDecodeError("utf-8", b"\xae", 0, 1, "invalid start byte"), read_failures.DAMAGED),
    (KeyError('Item "meta" was not found in the checkpoint. Available items: [\'state\']'),
     read_failures.DAMAGED),
    (ValueError('DATA_LOSS: Error reading local file "/c/6/state/d/1": Error decoding b-tree'),
     read_failures.DAMAGED),
    (ValueError('OUT_OF_RANGE: Error reading local file "/c/6/state/d/1": Requested byte'),
     read_failures.DAMAGED),
    (ValueError("NOT_FOUND: Error reading local file \"/c/d/1\" [os_error_code='2']"),
     read_failures.DAMAGED),
    (PermissionError(errno.EACCES, "Permission denied"), read_failures.UNREADABLE),
    (OSError(errno.ENOSPC, "No space left on device"), read_failures.UNREADABLE),
    (ValueError('PERMISSION_DENIED: Error opening local file "/c/6/state/d/1"'),
     read_failures.UNREADABLE),
    (ValueError("RESOURCE_EXHAUSTED: Failed writing [os_error_code='28']"),
     read_failures.UNREADABLE),
    (MemoryError(), read_failures.UNREADABLE),
    (ValueError("User-provided restore item and on-disk value metadata tree structures do "
                "not match"), read_failures.INCOMPATIBLE),
    (KeyError("params"), read_failures.INCOMPATIBLE),
])
def test_only_evidence_about_the_files_counts_as_damage(error, kind):
  assert read_failures.classify(error) == kind
  wrapped = RuntimeError("orbax wrapped it")
  wrapped.__cause__ = error
  assert read_failures.classify(wrapped) == kind


def test_the_cause_is_one_line_with_the_file_and_without_tensorstore_s_spec():
  error = ValueError(
      'PERMISSION_DENIED: Error opening "zarr" driver: Error reading local file "/c/6/state/": '
      + "x" * 300 + ' of local file "/c/6/state/d/ab": Failed to open: "/c/6/state/d/ab": '
      "Permission denied [tensorstore_spec='{\"driver\":\"zarr\"}'] [os_error_code='13']\n"
      "second line")
  assert read_failures.culprit(error, "/c/6") == "/c/6/state/d/ab"
  cause = read_failures.describe(error)
  assert cause.startswith("ValueError: PERMISSION_DENIED: Error opening") and "\n" not in cause
  assert cause.endswith("Permission denied [os_error_code='13']") and "spec" not in cause
  assert read_failures.culprit(OSError(errno.EIO, "Input/output error", "/c/6/x"), "/c/6") == \
      "/c/6/x"
  assert read_failures.culprit(MemoryError(), "/c/6") == "/c/6"
