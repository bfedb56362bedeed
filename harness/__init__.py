"""The shared harness that starts real Kafka, S3Proxy, Spark clusters, producers and browsers for tests and benchmarks.

It also generates the synthetic journals they replay (synthetic_journals, month_model): data for tests and
benchmarks, not part of the product.

Not shipped: the wheel's package discovery (pyproject.toml) takes quota_pipeline only. Run from the repository root,
tests and benchmarks import it as `harness.<module>`."""
