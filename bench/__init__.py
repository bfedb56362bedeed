"""Benchmarks, each run from the repository's root as a module (`python3 -m bench.<script>`); the figures, with their
commands, are in bench/RESULTS.md."""
