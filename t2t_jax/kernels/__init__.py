"""The kernels the model and the searches run, each beside its reference, and the one place
(`ops`) that chooses among them for the platform a program is built for."""

# Its public modules (any other module is a part of these).
__all__ = ["logits", "masks", "ops", "topk"]
