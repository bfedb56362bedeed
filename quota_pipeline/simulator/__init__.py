"""A Kafka cluster simulator speaking the admin wire protocol, driven by a scenario of filling disks and faults."""
from quota_pipeline.simulator.clock import SimClock
from quota_pipeline.simulator.scenario import FaultSpec, Scenario, ScenarioError, from_flags, load_scenario
from quota_pipeline.simulator.server import PortInUse, Simulator
from quota_pipeline.simulator.state import SimulatedCluster

__all__ = [
    "SimulatedCluster", "FaultSpec", "PortInUse", "Scenario", "ScenarioError", "SimClock", "Simulator",
    "from_flags", "load_scenario",
]
