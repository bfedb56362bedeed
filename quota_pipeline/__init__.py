"""quota-pipeline: cluster-wide disk-pressure throttling for Apache Kafka, decided by Spark."""
__version__ = "0.1.0"
