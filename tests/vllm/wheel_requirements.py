"""Prints a wheel's Requires-Dist entries (no extras), one per line, minus excluded names.

vLLM 0.34.0 pins flashinfer-python==0.7.3, which the package registry does not serve; the CPU
builder paths never import it, so scripts/vllm-diff.sh installs the wheel with --no-deps and
then this list.
Usage: wheel_requirements.py WHEEL [EXCLUDED_NAME ...]
"""

import re
import sys
import zipfile


def requirements(wheel_path, excluded):
    with zipfile.ZipFile(wheel_path) as wheel:
        meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        meta = wheel.read(meta_name).decode()
    out = []
    for line in meta.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = line[len("Requires-Dist:"):].strip()
        if "extra ==" in req:
            continue
        name = re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0]
        if name.lower().replace("_", "-") in excluded:
            continue
        out.append(req)
    return out


if __name__ == "__main__":
    excluded = {n.lower().replace("_", "-") for n in sys.argv[2:]}
    print("\n".join(requirements(sys.argv[1], excluded)))
