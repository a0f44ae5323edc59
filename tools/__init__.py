"""The book's own commands, beside its package: each is run from the checkout's root as
`python -m tools.NAME` (the Makefile's targets do), so that `tools` and `annotated` import from the
checkout without any change to `sys.path`.

    book        the chapters' notebooks: sync, execute, status, reach
    chapters    what the others share: the chapters, their notebooks and cells, the slide marks,
                and the import graph of the package
    booksite    the HTML site (and the Sphinx extension site/conf.py loads)
    bookslides  a slide deck per chapter
    bookpdf     the whole book as one PDF
    run_book    every chapter executed afresh and compared with its saved outputs
    student     the student edition
    grade       a class's grade sheet, from its parts: sandbox (the bubblewrap command, limits,
                supervision), wire (what grader and worker say to each other), sheets (the
                sheets written); grade_worker runs inside the sandbox
    publish     the README's badges, the release's wheel and sdist, the tag check
    lock        constraints.txt from a fresh environment
"""
