"""The decision semantics in plain Python, readable next to DESIGN.md: the reference (the oracle) the property tests hold
the compiled decision (core/compiled/) to. cache: steps 1-3; decision: step 4; policy: the volume factor; trend: fill
rates and the predictive envelope."""
