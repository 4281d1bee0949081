"""Every public case (tests/data/public.jsonl) through the Python API on the host
target, with numpy inputs: the same mapping and comparison as linmeta-replay."""

import numpy as np
import pytest

import case_util as cu
import linmeta

CASES = cu.load_cases()


def host(v):
    return np.asarray(v, dtype=np.int32)


def host_bool(v):
    return np.asarray(v, dtype=np.bool_)


def table(rows):
    return np.asarray(rows, dtype=np.int32).reshape(len(rows), -1)


def to_numpy(a):
    return np.from_dlpack(a)


def test_case_file_loaded():
    assert len(CASES) >= 111
    assert sum("groups" in c["step"] for c in CASES) >= 1


@pytest.mark.parametrize("case", CASES, ids=cu.case_id)
def test_public_case(case):
    results, _ = cu.run_case(case, host, host, host_bool, table)
    cu.assert_matches(case, results, case["builder"], to_numpy)


MULTI = [c for c in CASES if "groups" in c["step"]]


@pytest.mark.parametrize("case", MULTI, ids=cu.case_id)
def test_multi_group_equals_independent_builds(case):
    together, _ = cu.run_case(case, host, host, host_bool, table)
    apart, _ = cu.run_case(case, host, host, host_bool, table, independent=True)
    for a, b in zip(together, apart):
        assert cu.to_json(a, case["builder"], to_numpy) == cu.to_json(b, case["builder"], to_numpy)
    # Each group wrote its own buffers: group 0's views were not overwritten by later groups.
    cu.assert_matches(case, together, case["builder"], to_numpy)


@pytest.mark.parametrize("case", MULTI, ids=cu.case_id)
def test_update_block_table_regathers(case):
    """update_block_table(md, table g) == an independent build with table g."""
    tabs = [table(t) for t in cu.tables(case)]
    b = cu.builder_class(case)(**cu.config_kwargs(case))
    kw = cu.step_kwargs(case, host, host, host_bool)
    capture = case.get("mode", "build") == "capture"
    fn = b.build_for_cudagraph_capture if capture else b.build
    md0 = fn(block_table=tabs[0], **kw)
    exp = cu.expected_groups(case)
    for g in range(1, len(tabs)):
        md = b.update_block_table(md0, tabs[g])
        assert md.group == 0
        bad = cu.mismatches(exp[g], cu.to_json(md, case["builder"], to_numpy))
        assert not bad, bad


@pytest.mark.parametrize("array_type", ["numpy", "dlpack"])
def test_array_type_numpy(array_type):
    case = CASES[0]
    results, builders = cu.run_case(case, host, host, host_bool, table, array_type=array_type)
    md = results[0]
    assert builders[0].array_type == array_type
    if array_type == "numpy":
        assert isinstance(md.non_spec_state_indices_tensor, np.ndarray)
        cu.assert_matches(case, results, case["builder"], np.asarray)
    else:
        assert not isinstance(md.non_spec_state_indices_tensor, np.ndarray)
        assert md.non_spec_state_indices_tensor.__dlpack_device__() == (1, 0)
    cu.assert_matches(case, results, case["builder"], to_numpy)


def test_torch_cpu_inputs_and_outputs():
    torch = pytest.importorskip("torch")
    case = CASES[0]

    def t_host(v):
        return torch.tensor(v, dtype=torch.int32)

    def t_bool(v):
        return torch.tensor(v, dtype=torch.bool)

    def t_table(rows):
        return torch.tensor(rows, dtype=torch.int32)

    results, _ = cu.run_case(case, t_host, t_host, t_bool, t_table, array_type="torch")
    md = results[0]
    assert isinstance(md.non_spec_state_indices_tensor, torch.Tensor)
    assert md.non_spec_state_indices_tensor.dtype == torch.int32
    assert md.has_initial_state.dtype == torch.bool
    cu.assert_matches(case, results, case["builder"], lambda a: a.numpy())
