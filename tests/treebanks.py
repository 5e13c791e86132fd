"""A handful of WSJ-style trees, and treebank directories of them in either layout
(tests/recipes/test_parsing.py, tests/cli/test_parsing.py)."""

from t2t_jax.recipes import treebank


def tree(text):
  return treebank.clean(treebank.parse_trees(text)[0])


# A handful of WSJ-style trees (root wrappers, function tags, a trace) for the pipeline.
TREES = [
    "( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat) (PP-LOC (IN on) (NP (DT the) (NN mat)))) (. .)) )",
    "( (S (NP-SBJ (PRP It)) (VP (VBD rained)) (. .)) )",
    "( (S (NP-SBJ (NNP John)) (VP (VBZ likes) (NP (JJ red) (NNS apples))) (. .)) )",
    "( (S (NP-SBJ-1 (NNS Dogs)) (VP (VBP want) (S (NP-SBJ (-NONE- *-1)) (VP (TO to) "
    "(VP (VB run))))) (. .)) )",
    "( (S (NP-SBJ (DT A) (NN man)) (VP (VBD saw) (NP (DT a) (NN dog)) (PP (IN with) "
    "(NP (DT a) (NN telescope)))) (. .)) )",
    "( (S (NP-SBJ (PRP She)) (VP (VBD gave) (NP (PRP him)) (NP (DT a) (NN book))) (. .)) )",
]


def write_treebank(directory, layout):
  """`layout`: "named" (train/dev/test.mrg) or "sections" (WSJ 00..24, a file each)."""
  directory.mkdir()
  if layout == "named":
    (directory / "train.mrg").write_text("\n".join(TREES * 3) + "\n")
    (directory / "dev.mrg").write_text("\n".join(TREES[:2]) + "\n")
    (directory / "test.mrg").write_text("\n".join(TREES[2:5]) + "\n")
  else:  # WSJ sections 00..24, one file each
    for section in range(25):
      (directory / f"{section:02d}").mkdir()
      (directory / f"{section:02d}" / f"wsj_{section:02d}01.mrg").write_text(
          TREES[section % len(TREES)] + "\n")
