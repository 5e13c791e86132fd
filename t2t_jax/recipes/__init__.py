"""The paper's experiments: one run end to end (WMT14), Table 3's rows, constituency parsing (section 6.3)."""

# Its public modules (any other module is a part of these).
__all__ = ["experiment", "multi30k", "paper", "parsing", "table3"]
