"""Fuzzing every parser with mutations of real files (``nox -s fuzz``; a slice runs in the
test-suite). See :mod:`tests.fuzz.run`."""
