"""Batch replay: the cluster pass (a cluster's journal rows through core/compiled/kernel.py), the job, sweeps and the report."""
