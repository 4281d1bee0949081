"""Shared pytest setup: the random tests' seed heads every run's output (docs/testing.md)."""

import os

import pytest


def pytest_report_header(config):
    seed = os.environ.get("LINMETA_TEST_SEED")
    if seed:
        return f"LINMETA_TEST_SEED={seed} (set it again to repeat this run's random steps)"
    return "LINMETA_TEST_SEED unset: the random tests use their fixed seeds"


def pytest_sessionstart(session):
    """With LINMETA_TEST_INSTALLED=1 (scripts/python-test.sh: the wheel installed in a venv)
    the tests must run against that installed package: a linmeta imported from anywhere but
    the interpreter's site-packages (e.g. the checkout's python/ or a build tree) stops the run."""
    if os.environ.get("LINMETA_TEST_INSTALLED") != "1":
        return
    import sysconfig

    import linmeta

    here = os.path.realpath(os.path.dirname(linmeta.__file__))
    site = {os.path.realpath(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")}
    if os.path.dirname(here) not in site:
        pytest.exit(
            f"LINMETA_TEST_INSTALLED=1 but linmeta was imported from {here}, "
            f"not from the installed package in {sorted(site)}",
            returncode=1,
        )
