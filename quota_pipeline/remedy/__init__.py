"""`remedy`: a plan that brings log dirs at or past their limit back above it by moving the fewest bytes, and its
execution (AlterReplicaLogDirs on the same broker, else AlterPartitionReassignments under a replication throttle)."""
