"""Shared pytest setup: the random tests' seed heads every run's output (docs/testing.md)."""

import os


def pytest_report_header(config):
    seed = os.environ.get("LINMETA_TEST_SEED")
    if seed:
        return f"LINMETA_TEST_SEED={seed} (set it again to repeat this run's random steps)"
    return "LINMETA_TEST_SEED unset: the random tests use their fixed seeds"
