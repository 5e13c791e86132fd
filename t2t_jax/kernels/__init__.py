"""The kernels the model and the searches run, each beside its reference, and the one place
(`ops`) that chooses among them for the platform a program is built for.

The model calls `ops.attention`, `ops.dropout` and `ops.project_logits`, the searches
`ops.top_k`; neither names a kernel. `masks` says which keys a query may see, in the
dense form the reference reads and the structured one the fused kernels read.
"""

# Its public modules (any other module is a part of these).
__all__ = ["int8", "logits", "masks", "ops", "topk"]
