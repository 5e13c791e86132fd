"""The console scripts and the one command-line parser (`flags`) they share."""

# Its public modules (any other module is a part of these).
__all__ = ["average", "bleu", "compile", "constituency_parsing", "export", "flags", "import_model",
           "multi30k", "serve", "shortlist", "table3", "train", "translate"]
