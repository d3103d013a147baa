"""What several test modules share and is not a fixture: synthetic data, the workflow's copy,
the fuzzing machinery, the schedulers' helpers (fixtures are in tests/conftest.py). No test
module imports another."""
