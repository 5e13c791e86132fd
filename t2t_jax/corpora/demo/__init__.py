"""The demo's generated English -> German-like corpus (no download; minutes to learn on a CPU).

    demo.write_corpus(directory)     # {train,dev,test}.{en,de} and their checksums
    demo.corpus_paths(directory)     # those files, or None when any is missing or damaged
    demo.generate(num_pairs, seed)   # [(english, german)] in memory, distinct

`corpus.py` samples sentences and writes the files, `syntax.py` renders phrases and clauses in
English and German word order, `lexicon.py` holds the words (data only).
"""

from t2t_jax.corpora.demo.corpus import corpus_paths as corpus_paths
from t2t_jax.corpora.demo.corpus import generate as generate
from t2t_jax.corpora.demo.corpus import write_corpus as write_corpus

__all__ = ["corpus_paths", "generate", "write_corpus"]
