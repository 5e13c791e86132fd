"""A work directory as a model of another engine (transformers, CTranslate2), and search in those engines."""

# Its public modules (any other module is a part of these).
__all__ = ["ctranslate2", "exported_search", "huggingface", "import_marian", "loading"]
