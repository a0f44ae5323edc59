"""What the site's "Try the model" page runs, exported from the book: chapter 7's model with its
weights quantized (`browser_model`, `make try-model`) and spaCy's tokenizer rules (`spacy_rules`).
Nothing in the book imports this package; it imports whatever it exports.
"""
