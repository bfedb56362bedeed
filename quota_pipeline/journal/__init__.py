"""The snapshot journal: the per-tick store, its validation rules, and its Spark reader."""
