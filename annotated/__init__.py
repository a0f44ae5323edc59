"""The Annotated Transformer, as a book.

Each chapter is a module, `annotated.chNN_topic`, and a notebook, `notebooks/chNN_topic.ipynb`,
generated from it. Importing a chapter defines things and does nothing else: no printing,
plotting, downloading or training.
"""

__version__ = "0.1.0"
