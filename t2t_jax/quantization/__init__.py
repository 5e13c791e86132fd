"""Decoding in int8 or bfloat16: the products a `quantization="int8"` or `"bfloat16"` model runs,
handed to the model as plug-ins (model/plugins.py) by `kernels.choice.plugins`, which imports
`int8` or `bfloat16` only for such a model; `quantized.quantize_params` converts a float32
model's params once at load. Training never loads this package.
"""

# Its public modules (any other module is a part of these).
__all__ = ["bfloat16", "int8", "quantized"]
