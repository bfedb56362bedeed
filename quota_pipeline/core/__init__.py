"""Pure decision logic (no Spark, no Kafka): configuration, model, policy, volume cache, decision step, record."""
