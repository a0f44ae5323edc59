"""The ground floor: what the chapters stand on and no chapter is about.

Files written atomically and the run folder's place (`files`), the threads, devices and
precisions a process uses (`threads`, `devices`), being one of several processes (`distributed`),
the training step's fast path (`fast_step`), checkpoint files (`checkpoints`), the data sets'
verified downloads (`datasets`) and one description of the machine (`machine`). Nothing here
imports a chapter: `tests/test_layers.py` holds the order of the package's layers.
"""
