"""Datasets generated here rather than downloaded (the demo corpus)."""
