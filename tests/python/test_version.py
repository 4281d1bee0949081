"""One version number: CMakeLists.txt's project(linmeta VERSION ...) is linmeta.__version__, the
installed distribution's version and the wheel's (its file name); the C++ header's
LINMETA_VERSION is checked against the same project version by the host test VersionTest.
The installed extension needs no CUDA toolkit library and no torch (docs/building.md)."""

import os
import re
import shutil
import subprocess
from importlib import metadata

import pytest

import linmeta

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
INSTALLED = os.environ.get("LINMETA_TEST_INSTALLED") == "1"


def cmake_project_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        m = re.search(r"^project\(linmeta VERSION ([0-9]+\.[0-9]+\.[0-9]+)[ )]", f.read(), re.M)
    assert m, "CMakeLists.txt has no project(linmeta VERSION x.y.z ...) line"
    return m.group(1)


def test_version_is_the_cmake_project_version():
    assert linmeta.__version__ == cmake_project_version()


def test_installed_distribution_has_the_version():
    try:
        dist = metadata.distribution("linmeta")
        ours = os.path.samefile(dist.locate_file("linmeta/__init__.py"), linmeta.__file__)
    except (metadata.PackageNotFoundError, FileNotFoundError):
        ours = False
    if not ours:
        if INSTALLED:
            pytest.fail(f"no installed distribution holds the imported {linmeta.__file__}")
        pytest.skip("the imported linmeta is no installed distribution (a build tree)")
    assert dist.version == linmeta.__version__


@pytest.mark.skipif(not os.environ.get("LINMETA_WHEEL"), reason="LINMETA_WHEEL unset")
def test_wheel_file_name_has_the_version_and_a_manylinux_tag():
    name = os.path.basename(os.environ["LINMETA_WHEEL"])
    m = re.fullmatch(r"linmeta-([^-]+)-(cp[0-9]+)-(cp[0-9]+)-(.+)\.whl", name)
    assert m, name
    assert m.group(1) == linmeta.__version__
    assert all(p.startswith("manylinux_") for p in m.group(4).split(".")), name


def test_installed_from_the_wheel_with_no_cuda_compiler():
    """scripts/python-test.sh's run: linmeta from the venv's site-packages, nvcc not on PATH."""
    if not INSTALLED:
        pytest.skip("LINMETA_TEST_INSTALLED unset (not scripts/python-test.sh's run)")
    assert "site-packages" in linmeta.__file__.split(os.sep)
    assert not linmeta.__file__.startswith(os.path.join(REPO, "python") + os.sep)
    assert shutil.which("nvcc") is None


# The C and C++ runtimes: what the extension may load besides itself (the CUDA runtime is
# linked statically and opens the driver's libcuda.so.1 itself, at the first CUDA call).
ALLOWED_NEEDED = {
    "libc.so.6",
    "libm.so.6",
    "libstdc++.so.6",
    "libgcc_s.so.1",
    "libpthread.so.0",
    "libdl.so.2",
    "librt.so.1",
    "ld-linux-x86-64.so.2",
}


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf")
def test_extension_needs_no_cuda_toolkit_torch_or_python_library():
    out = subprocess.run(
        ["readelf", "-d", linmeta._linmeta.__file__], capture_output=True, text=True, check=True
    ).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))
    assert needed, out
    assert needed <= ALLOWED_NEEDED, sorted(needed - ALLOWED_NEEDED)
