"""Corpora the product brings: the demo's generated English -> German-like corpus (`demo`, loaded
only when `dataset="demo"` asks for it) and Multi30k fetched at run time (`multi30k`, the
int8/shortlist check's corpus). The paper's data path (WMT14, your own files) is `data/`.
"""

# Its public modules (any other module is a part of these).
__all__ = ["demo", "multi30k"]
