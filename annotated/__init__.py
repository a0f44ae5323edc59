"""The Annotated Transformer, as a book.

Each chapter is a module, `annotated.chNN_topic`, and a notebook, `notebooks/chNN_topic.ipynb`,
generated from it. Importing a chapter defines things and does nothing else: no printing,
plotting, downloading or training.

One setting is made on import, because it must be made before the first matrix product:
oneDNN, the library behind PyTorch's bfloat16 matrix products on a CPU, keeps the kernels it
prepared for each shape in a cache of 1,024 by default. A training run meets more shapes than
that in an epoch (chapter 7's batches need about 2,300, chapter 8's WMT sample about 4,100), so
with the default every step prepared its kernels afresh: 20 to 40% of a step on the Xeon of the
benchmark record. `ONEDNN_CACHE_CAPACITY` keeps them all; a value already in the environment
wins. tests/test_onednn_cache.py checks that the setting takes effect.
"""

import os

__version__ = "0.1.0"

ONEDNN_CACHE_CAPACITY = 16384  # kernels kept, at most: four times what chapter 8's sample needs
# Whether the capacity in this process's environment is the book's rather than one the reader set
# (a benchmark that runs an older version of the book must leave the book's out: see
# benchmarks/bench_multi30k.py).
ONEDNN_CACHE_FROM_BOOK = "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in os.environ
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_CACHE_CAPACITY))
