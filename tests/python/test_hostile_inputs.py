"""No hostile Python input may crash the process: every entry point of linmeta (the plain API
and linmeta.vllm's builders) raises TypeError or ValueError (linmeta.Error) naming the
argument, for every odd input of tests/python/hostile_cases.py (torch meta / sparse /
strided / 0-d tensors, wrong dtypes, huge shapes and strides, odd __array_interface__ dicts,
raw DLPack capsules, odd scalars, constructor keywords), and takes the odd but valid ones.

The cases run in worker subprocesses (hostile_cases.py's worker), so that a crash (SIGSEGV,
SIGFPE, an abort) fails the case that caused it instead of ending the run: the worker prints
each case before running it; when a worker dies, that case is recorded as a crash and a new
worker continues after it. One test per entry point and argument checks all of its cases.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys

import pytest

import hostile_cases as hc

CASES = hc.all_cases()
GROUPS = list(dict.fromkeys(c.group for c in CASES))
WORKER = os.path.join(hc.HERE, "hostile_cases.py")
TIMEOUT_S = 600


@functools.lru_cache(maxsize=None)
def results():
    """{case index: outcome dict} for every case, from as many workers as crashes need."""
    env = dict(os.environ)
    out = {}
    start = 0
    while start < len(CASES):
        proc = subprocess.run(
            [sys.executable, WORKER, str(start)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            cwd=hc.HERE,
            env=env,
        )
        started = None
        done = False
        for line in proc.stdout.splitlines():
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "done" in msg:
                done = True
                assert msg["done"] == len(CASES), "the worker lists other cases than the test"
            elif "start" in msg:
                started = msg["i"]
                assert CASES[started].id == msg["start"], (CASES[started].id, msg["start"])
            else:
                out[msg["i"]] = msg
                started = None
        if done:
            break
        if started is None:  # died between cases (or before the first)
            raise AssertionError(
                f"hostile_cases worker failed (rc {proc.returncode}) outside a case:\n"
                f"{proc.stderr[-4000:]}"
            )
        rc = proc.returncode
        why = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
        out[started] = {"crash": why, "stderr": proc.stderr[-3000:]}
        start = started + 1
    return out


def failure(case, outcome):
    """Why `outcome` is wrong for `case`, or None."""
    if outcome is None:
        return "no outcome (the worker skipped it)"
    if "crash" in outcome:
        return f"CRASHED the process ({outcome['crash']}):\n{outcome['stderr']}"
    if "ok" in outcome:
        if case.expect == hc.RAISE:
            return "returned instead of raising"
        return None
    raised = f"{outcome['raised']}: {outcome['message']}"
    if case.expect == hc.OK:
        return f"raised {raised}\n{outcome['where']}"
    if not outcome["accepted"]:
        return f"raised {raised} (not a TypeError / ValueError)\n{outcome['where']}"
    if not re.search(case.match, outcome["message"]):
        return f"raised {raised}, which does not name /{case.match}/"
    return None


def test_every_kind_of_case_is_there():
    groups = set(GROUPS)
    for entry in ("gdn.build", "gdn.build_for_cudagraph_capture", "gdn.build_groups",
                  "kda.build", "kda-recoverssm.build"):
        for arg in hc.ARRAY_ARGS:
            assert f"{entry}:{arg}" in groups
    assert "update_block_table:block_table" in groups
    assert "GdnMetadataBuilder():max_num_seqs" in groups
    labels = {c.name for c in CASES if c.group == "gdn.build:query_start_loc_cpu"}
    for label in ("iface-null-data", "iface-itemsize-<i0-strided", "iface-itemsize-<i32-strided",
                  "iface-typestr-5", "iface-shape-wrong-type-1", "iface-strides-short",
                  "iface-shape-2^62", "dlpack-null-data", "numpy-float32", "none"):
        assert label in labels
    if hc.torch is not None:
        assert "torch-meta" in labels and "torch-sparse" in labels
    if hc.vllm_available():
        for entry in ("vllm.gdn.build", "vllm.kda.build", "vllm.kda-recoverssm.build"):
            for field in ("query_start_loc_cpu", "seq_lens_cpu_upper_bound", "is_prefilling",
                          "num_decode_draft_tokens_cpu"):
                assert f"{entry}:{field}" in groups


@pytest.mark.parametrize("group", GROUPS)
def test_hostile_inputs(group):
    res = results()
    bad = []
    for i, case in enumerate(CASES):
        if case.group != group:
            continue
        why = failure(case, res.get(i))
        if why is not None:
            bad.append(f"{case.id}: {why}")
    assert not bad, f"{len(bad)} of the cases of {group} failed:\n" + "\n".join(bad)


# The crashes this suite was written for, by case (each crashed the process or leaked a C++
# message before the import layer checked its inputs).
REPORTED = [
    # __array_interface__ item sizes 0 / 32 with strides: SIGFPE (bits in a uint8_t, then
    # bytes % itemsize); typestr "<iX": "ValueError: stoi"; a shape that is no tuple:
    # "RuntimeError: std::bad_cast".
    "gdn.build:query_start_loc_cpu/iface-itemsize-<i0-strided",
    "gdn.build:query_start_loc_cpu/iface-itemsize-<i32-strided",
    "gdn.build:query_start_loc_cpu/iface-typestr-5",
    "gdn.build:query_start_loc_cpu/iface-shape-wrong-type-1",
    "gdn.build:block_table/iface-shape-wrong-type-1",
    # Host arrays that point at nothing: SIGSEGV.
    "gdn.build:query_start_loc_cpu/torch-meta",
    "gdn.build:seq_lens_cpu_upper_bound/torch-meta",
    "gdn.build:query_start_loc_cpu/iface-null-data",
    "gdn.build:block_table/iface-strides-short",
    "gdn.build:query_start_loc_cpu/iface-data-wrong-type-4",  # data = ()
]
# linmeta.vllm: a meta tensor in a host input: SIGSEGV (GDN, KDA, KDA + RecoverSSM).
REPORTED += [
    pytest.param(f"vllm.{kind}.build:{field}/torch-meta",
                 marks=pytest.mark.skipif(not hc.vllm_available(), reason=str(hc.vllm_missing())))
    for kind in ("gdn", "kda", "kda-recoverssm")
    for field in ("query_start_loc_cpu", "seq_lens_cpu_upper_bound", "is_prefilling",
                  "num_decode_draft_tokens_cpu")
]


@pytest.mark.parametrize("case_id", REPORTED)
def test_reported_crashes_raise_naming_the_argument(case_id):
    index = {c.id: i for i, c in enumerate(CASES)}
    if hc.torch is None and "torch" in case_id:
        pytest.skip("needs torch")
    i = index[case_id]
    case = CASES[i]
    assert case.expect == hc.RAISE
    why = failure(case, results().get(i))
    assert why is None, f"{case_id}: {why}"
