"""The book's benchmarks: each measures one claim the book makes and writes its record into
benchmarks/results/ (README.md here says what each record shows). Each is run from the checkout's
root as `python -m benchmarks.NAME` (the Makefile's targets do), so that `benchmarks.common`,
`tools` and `annotated` import from the checkout.
"""
