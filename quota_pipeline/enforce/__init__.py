"""Decisions applied to stock Kafka through client quotas: plan, enforcer, baseline."""
