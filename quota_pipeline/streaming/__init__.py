"""The streaming job: kafka_volumes source, stateful decision processor, query, supervisor, metrics."""
