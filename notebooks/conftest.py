"""pytest settings for `pytest --nbval notebooks`: re-execute the notebooks as `make book` did.

The notebooks were executed with ANNOTATED_CHART_HTML=1 (see annotated/figures.py), so their charts
carry an offline HTML form; nbval's kernels inherit this process's environment, so the same
setting here makes them produce the same outputs.
"""

import os

from annotated.figures import HTML_ENV

os.environ[HTML_ENV] = "1"

# Chapters that train (7 and 8) run their smoke profile under nbval unless told otherwise:
# the same code on a tiny model and a few steps (see PROFILE_ENV in annotated/training/runs.py).
os.environ.setdefault("ANNOTATED_PROFILE", "smoke")
