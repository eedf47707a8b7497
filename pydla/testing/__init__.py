"""Tools for testing pydla and what is built on it (fuzzing its readers: :mod:`pydla.testing.fuzz`)."""
