"""Constituency parsing as translation (section 6.3): trees <-> bracket sequences, EVALB F1.

Trees are read from Penn-Treebank-style s-expressions and linearised as in
"Grammar as a Foreign Language" (Vinyals et al., 2015): a depth-first walk that
writes `(LABEL` on entering a constituent, `)LABEL` on leaving it and one token
per word for its part-of-speech tag. POS tags are normalised to `XX` by default
(as in that paper; the words are in the source sentence, so the tree needs only
their positions). `keep_pos=True` writes the real tags instead.

    (S (NP (NNP John)) (VP (VBZ has) (NP (DT a) (NN dog))) (. .))
    -> (S (NP XX )NP (VP XX (NP XX XX )NP )VP XX )S

`clean` applies the usual WSJ preprocessing before linearising: the root wrapper
`( ... )`/`(TOP ...)` is removed (named `TOP` if it holds several pieces),
`-NONE-` empty elements (traces) and the constituents left empty by that are
deleted, and function tags and indices are stripped (`NP-SBJ-1` -> `NP`,
`PP=2` -> `PP`; `-LRB-` and friends are kept).

`bracket_f1` scores labelled brackets like EVALB with its default parameter file
(COLLINS.prm):
  * words whose gold POS tag is punctuation (`,` `:` `` `` `` `''` `.`) are
    deleted before spans are computed, in both trees (EVALB deletes by the gold
    tags; predicted trees carry `XX` tags, so gold tags are the only ones that
    can be used);
  * the root (TOP) bracket and POS-tag brackets are not counted; every other
    constituent is, duplicates included (a multiset, as EVALB matches them);
  * constituents left with no words after the deletion are not counted;
  * ADVP and PRT are the same label;
  * precision, recall and F1 are micro-averaged over the corpus, in percent.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import re
from typing import Iterable, Sequence, Union

POS_PLACEHOLDER = "XX"
# EVALB COLLINS.prm DELETE_LABEL for words: punctuation POS tags.
PUNCTUATION_TAGS = frozenset({",", ":", "``", "''", "."})
# EVALB COLLINS.prm EQ_LABEL: labels scored as one.
_EQUIVALENT_LABELS = {"PRT": "ADVP"}
_ROOT_LABELS = ("", "TOP", "ROOT")


@dataclasses.dataclass(frozen=True)
class Tree:
  """A constituent: a label and children that are Trees or words (str).

  A preterminal is a Tree whose only child is a word; its label is the POS tag.
  """
  label: str
  children: tuple[Union["Tree", str], ...] = ()

  @property
  def is_preterminal(self) -> bool:
    return len(self.children) == 1 and isinstance(self.children[0], str)

  def __str__(self) -> str:
    return to_string(self)


# --- Reading -------------------------------------------------------------------

def _tokenize_sexpr(text: str) -> list[str]:
  return text.replace("(", " ( ").replace(")", " ) ").split()


def parse_trees(text: str) -> list[Tree]:
  """All bracketed trees in `text` (any number per line, a tree may span lines)."""
  tokens = _tokenize_sexpr(text)
  trees, pos = [], 0
  while pos < len(tokens):
    if tokens[pos] != "(":
      raise ValueError(f"expected '(' at token {pos} but found {tokens[pos]!r}; "
                       "is this a Penn-Treebank-style bracketed file?")
    tree, pos = _parse_node(tokens, pos)
    trees.append(tree)
  return trees


def _parse_node(tokens: list[str], pos: int) -> tuple[Tree, int]:
  pos += 1  # the "("
  label = ""
  if pos < len(tokens) and tokens[pos] not in ("(", ")"):
    label, pos = tokens[pos], pos + 1
  children = []
  while True:
    if pos >= len(tokens):
      raise ValueError(f"unbalanced brackets: tree {label!r} is not closed before the end "
                       "of the text")
    if tokens[pos] == ")":
      return Tree(label, tuple(children)), pos + 1
    if tokens[pos] == "(":
      child, pos = _parse_node(tokens, pos)
      children.append(child)
    else:
      children.append(tokens[pos])
      pos += 1


def read_treebank(paths: Union[str, os.PathLike, Iterable[Union[str, os.PathLike]]]
                  ) -> list[Tree]:
  """Trees from one file, a directory (its files, sorted by name) or a list of both."""
  if isinstance(paths, (str, os.PathLike)):
    paths = [paths]
  files = []
  for path in map(os.fspath, paths):
    if os.path.isdir(path):
      files += sorted(os.path.join(path, name) for name in os.listdir(path)
                      if os.path.isfile(os.path.join(path, name)) and not name.startswith("."))
    elif os.path.isfile(path):
      files.append(path)
    else:
      raise FileNotFoundError(f"treebank file {path!r} does not exist; the Penn Treebank is "
                              "licensed and not shipped: point to your own copy")
  trees = []
  for path in files:
    with open(path, encoding="utf-8", errors="replace") as f:
      try:
        trees += parse_trees(f.read())
      except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
  return trees


def to_string(tree: Union[Tree, str]) -> str:
  """One-line bracketed form, e.g. `(S (NP (NNP John)) (VP (VBZ runs)))`."""
  if isinstance(tree, str):
    return tree
  return "(" + " ".join([tree.label] + [to_string(c) for c in tree.children]) + ")"


# --- Preprocessing ---------------------------------------------------------------

def strip_function_tags(label: str) -> str:
  """`NP-SBJ-1` -> `NP`, `PP=2` -> `PP`; labels starting with '-' (`-NONE-`, `-LRB-`) stay."""
  if label.startswith("-"):
    return label
  for sep in ("-", "="):
    label = label.split(sep, 1)[0]
  return label


def clean(tree: Tree) -> Tree:
  """WSJ preprocessing: no root wrapper, no empty elements, no function tags."""
  while tree.label in _ROOT_LABELS and len(tree.children) == 1 \
      and isinstance(tree.children[0], Tree):
    tree = tree.children[0]
  if tree.label in _ROOT_LABELS:  # a root over several pieces stays, named and not scored
    tree = Tree("TOP", tree.children)
  cleaned = _clean(tree)
  if cleaned is None:
    raise ValueError(f"tree has no words once empty elements are removed: {to_string(tree)}")
  return cleaned


def _clean(tree: Tree) -> Union[Tree, None]:
  if tree.label == "-NONE-":
    return None
  if tree.is_preterminal:
    return tree
  children = []
  for child in tree.children:
    if isinstance(child, str):  # a word directly under a phrase: malformed, keep it tagged
      children.append(Tree(POS_PLACEHOLDER, (child,)))
      continue
    child = _clean(child)
    if child is not None:
      children.append(child)
  if not children:
    return None
  return Tree(strip_function_tags(tree.label), tuple(children))


def words(tree: Tree) -> list[str]:
  return [pre.children[0] for pre in _preterminals(tree)]


def pos_tags(tree: Tree) -> list[str]:
  return [pre.label for pre in _preterminals(tree)]


def _preterminals(tree: Tree) -> list[Tree]:
  if tree.is_preterminal:
    return [tree]
  out = []
  for child in tree.children:
    if isinstance(child, Tree):
      out += _preterminals(child)
  return out


# --- Linearisation -------------------------------------------------------------------

def linearize(tree: Tree, keep_pos: bool = False) -> str:
  """The bracket sequence of a (cleaned) tree; see the module docstring."""
  out: list[str] = []

  def walk(node: Tree):
    if node.is_preterminal:
      out.append(node.label if keep_pos else POS_PLACEHOLDER)
      return
    out.append("(" + node.label)
    for child in node.children:
      if isinstance(child, Tree):
        walk(child)
    out.append(")" + node.label)

  walk(tree)
  return " ".join(out)


def split_sequence(text: str) -> list[str]:
  """Bracket-sequence tokens, also where a decoder glued them: "XX)NP(VP" -> XX )NP (VP."""
  return re.findall(r"[()][^\s()]*|[^\s()]+", text)


def delinearize(sequence: Union[str, Sequence[str]], sentence: Sequence[str],
                root_label: str = "S") -> Tree:
  """Rebuilds a tree over `sentence` from a (possibly malformed) predicted sequence.

  Always returns a tree whose words are exactly `sentence`, so that it can be
  scored: a closing bracket with nothing open is dropped; constituents still
  open at the end are closed; the label of a closing token is ignored (the
  opening one wins); POS tokens beyond the number of words are dropped and
  words left over are attached, in order, to the top constituent; constituents
  without words are dropped; several top-level pieces are put under one
  `root_label` node.
  """
  tokens = split_sequence(sequence) if isinstance(sequence, str) else list(sequence)
  sentence = list(sentence)
  # Each open constituent: [label, children]; the bottom entry is a virtual root.
  stack: list[tuple[str, list]] = [("", [])]
  next_word = 0
  for token in tokens:
    if token == "(":
      continue  # an opening bracket without a label: nothing to build
    if token.startswith("("):
      stack.append((token[1:], []))
    elif token.startswith(")"):
      if len(stack) > 1:
        _close(stack)
    elif next_word < len(sentence):
      stack[-1][1].append(Tree(token, (sentence[next_word],)))
      next_word += 1
  while len(stack) > 1:
    _close(stack)
  top = stack[0][1]
  if len(top) == 1 and not top[0].is_preterminal:
    tree = top[0]
  else:
    tree = Tree(root_label, tuple(top))
  if next_word < len(sentence):
    extra = tuple(Tree(POS_PLACEHOLDER, (w,)) for w in sentence[next_word:])
    tree = Tree(tree.label, tree.children + extra)
  if not tree.children:
    raise ValueError("cannot build a tree for an empty sentence")
  return tree


def _close(stack: list[tuple[str, list]]) -> None:
  label, children = stack.pop()
  if children:
    stack[-1][1].append(Tree(label, tuple(children)))


# --- Scoring ------------------------------------------------------------------------

def labelled_brackets(tree: Tree, deleted: Sequence[bool]) -> collections.Counter:
  """Multiset of (label, start, end) over the words not `deleted`, EVALB-style.

  `tree` is a cleaned tree (no root wrapper): its top node is counted. Positions
  count kept words only, so a span ignores the punctuation at its edges.
  """
  counts: collections.Counter = collections.Counter()
  word_index = 0   # position in the sentence
  kept_index = 0   # position among the words not deleted

  def visit(node: Tree) -> tuple[int, int]:
    nonlocal word_index, kept_index
    if node.is_preterminal:
      if word_index >= len(deleted):
        raise ValueError(f"tree has more words than the {len(deleted)} deletion flags given")
      start = kept_index
      kept_index += not deleted[word_index]
      word_index += 1
      return start, kept_index
    spans = [visit(child) for child in node.children if isinstance(child, Tree)]
    start, end = spans[0][0], spans[-1][1]
    if end > start and node.label not in _ROOT_LABELS:
      counts[(_EQUIVALENT_LABELS.get(node.label, node.label), start, end)] += 1
    return start, end

  visit(tree)
  if word_index != len(deleted):
    raise ValueError(f"tree has {word_index} words but {len(deleted)} deletion flags were given")
  return counts


def bracket_f1(gold: Sequence[Tree], predicted: Sequence[Tree]) -> dict[str, float]:
  """Corpus-level labelled bracketing precision/recall/F1 in percent (EVALB rules above).

  Both lists hold cleaned trees, pairwise over the same words.
  """
  if len(gold) != len(predicted):
    raise ValueError(f"{len(gold)} gold trees but {len(predicted)} predicted trees; "
                     "give one prediction per gold tree")
  matched = num_gold = num_predicted = exact = 0
  for i, (g, p) in enumerate(zip(gold, predicted)):
    g_words, p_words = words(g), words(p)
    if g_words != p_words:
      raise ValueError(f"tree {i}: predicted words {p_words} differ from gold words {g_words}")
    deleted = [tag in PUNCTUATION_TAGS for tag in pos_tags(g)]
    g_brackets, p_brackets = labelled_brackets(g, deleted), labelled_brackets(p, deleted)
    overlap = sum((g_brackets & p_brackets).values())
    matched += overlap
    num_gold += sum(g_brackets.values())
    num_predicted += sum(p_brackets.values())
    exact += g_brackets == p_brackets
  precision = 100.0 * matched / num_predicted if num_predicted else 0.0
  recall = 100.0 * matched / num_gold if num_gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return dict(precision=precision, recall=recall, f1=f1, matched=matched,
              gold_brackets=num_gold, predicted_brackets=num_predicted,
              exact_match=100.0 * exact / len(gold) if gold else 0.0, sentences=len(gold))
