"""Batch replay: the set-based form of the cache steps and the replay job."""
