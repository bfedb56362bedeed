"""Every Kafka client and wire call: client settings, admin connection, observer, publisher, client quotas."""
