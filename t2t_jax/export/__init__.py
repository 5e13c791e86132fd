"""A work directory as a model of another engine (transformers, CTranslate2), and search in those engines."""
