"""The fault campaign and its independent checker, run from the repository's root as modules (`python3 -m
verify.campaign`, `python3 -m verify.checker`); verify/README.md says how."""
