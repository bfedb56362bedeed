"""Sub-commands of the quota-pipeline CLI, one module each."""
