"""bench/host.py: the host's reference figure that benchmarks record beside theirs."""
from bench.host import reference


def test_the_reference_is_the_stateful_steps_median_measured_now():
    measured = reference(batches=5)
    assert "error" not in measured, measured
    assert 0 < measured["stateful_step_ms"] < 10_000
