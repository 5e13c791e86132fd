"""The console scripts and the one command-line parser (`flags`) they share, with how a command
ends (`exits`)."""

# Its public modules (any other module is a part of these).
__all__ = ["average", "bleu", "compile", "exits", "export", "flags", "import_model", "score",
           "serve", "shortlist", "train", "translate"]
