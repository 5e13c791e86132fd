"""A package, so that the tests here import their shared helper as `export.agreement`."""
