"""The self-contained demo and the local Kafka-compatible broker it uses."""
