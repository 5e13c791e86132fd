"""The paper's experiments: one run end to end (WMT14), Table 3's rows, constituency parsing (section 6.3)."""
