"""Monitoring as code: the Grafana dashboard over the driver's metrics (the alert rules are in conf/monitoring/)."""
