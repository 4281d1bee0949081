"""Every case of tests/data through the Python API on the host target, numpy in, DLPack and
numpy out: the mapping and comparison rules of linmeta-replay (case_util.py)."""

import copy

import numpy as np
import pytest

import case_util as cu
import linmeta

CASES = cu.all_cases()
ERRORS = cu.error_cases()


def host(v):
    return np.asarray(v, dtype=np.int32)


def host_bool(v):
    return np.asarray(v, dtype=np.bool_)


def table(rows):
    return np.asarray(rows, dtype=np.int32).reshape(len(rows), -1)


def to_numpy(a):
    return np.from_dlpack(a)


#: The kinds of vLLM's case files (the SGLang kinds have cases of their own:
#: tests/data/sglang/, docs/sglang-cases.md).
VLLM_KINDS = tuple(k for k in linmeta.BUILDER_KINDS if k not in linmeta.SGLANG_KINDS)


def test_case_files_loaded():
    assert len(CASES) >= 111 + 60 + 257 + 128 + 86
    assert sum("groups" in c["step"] for c in CASES) >= 1
    assert {c["builder"] for c in CASES} == set(VLLM_KINDS)


@pytest.mark.parametrize("part, key", [("", "notes"), ("config", "checkpoint_alignment"),
                                       ("config", "chunk_metadata"), ("step", "seq_len"),
                                       ("error", "raised_at")])
def test_unknown_case_key_is_an_error(part, key):
    case = copy.deepcopy(CASES[0])
    case["error"] = {"type": "ValueError"}
    (case[part] if part else case)[key] = 1
    where = part + ": " if part else ""
    with pytest.raises(ValueError, match=f"^f.jsonl:7: {where}unknown key '{key}'$"):
        cu.check_keys(case, "f.jsonl:7")


def test_comment_is_a_case_key():
    cu.check_keys(dict(CASES[0], comment={"any": ["value"]}), "f.jsonl:1")


@pytest.mark.parametrize("case", CASES, ids=cu.case_id)
def test_case(case):
    results, _ = cu.run_case(case, host, host, host_bool, table)
    cu.assert_matches(case, results, to_numpy)


@pytest.mark.parametrize("case", ERRORS, ids=cu.case_id)
def test_error_case(case):
    """A step the reference rejects (ValueError, TypeError, AssertionError) raises
    linmeta.Error; on a reference bug (seed 000's UnboundLocalError) linmeta answers as SPEC
    says, the answer checked by the C++ replay (tools/case_file.cpp ReferenceError)."""
    if case["error"]["type"] in ("ValueError", "TypeError", "AssertionError"):
        with pytest.raises(linmeta.Error, match=r"\S"):
            cu.run_case(case, host, host, host_bool, table)
    else:
        results, _ = cu.run_case(case, host, host, host_bool, table)
        assert results and all(md.num_spec_decodes == 0 for md in results)


MULTI = [c for c in CASES if "groups" in c["step"]]


@pytest.mark.parametrize("case", MULTI, ids=cu.case_id)
def test_multi_group_equals_independent_builds(case):
    together, _ = cu.run_case(case, host, host, host_bool, table)
    apart, _ = cu.run_case(case, host, host, host_bool, table, independent=True)
    for a, b in zip(together, apart):
        assert cu.to_json(a, case["builder"], to_numpy) == cu.to_json(b, case["builder"], to_numpy)
    # Each group wrote its own buffers: group 0's views were not overwritten by later groups.
    cu.assert_matches(case, together, to_numpy)


@pytest.mark.parametrize("case", MULTI, ids=cu.case_id)
def test_update_block_table_regathers(case):
    """update_block_table(md, table g) == an independent build with table g."""
    tabs = [table(t) for t in cu.tables(case)]
    b = linmeta.MetadataBuilder(case["builder"], **cu.config_kwargs(case))
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


@pytest.mark.parametrize("kind", VLLM_KINDS)
def test_numpy_outputs_alias_dlpack_outputs(kind):
    """array_type='numpy' returns ndarrays of the same buffers the DLPack outputs view."""
    case = next(c for c in CASES if c["builder"] == kind and "groups" not in c["step"])
    results, builders = cu.run_case(case, host, host, host_bool, table, array_type="numpy")
    assert builders[0].array_type == "numpy"
    md = results[0]
    arrays = [getattr(md, n) for n in linmeta.fields_of(kind) if "." not in n]
    assert any(isinstance(a, np.ndarray) for a in arrays)
    cu.assert_matches(case, results, np.asarray)


def run_with_torch(case):
    """A case with torch tensors in and out (array_type='torch'): (results, torch)."""
    torch = pytest.importorskip("torch")

    def t_int(v):
        return torch.tensor(v, dtype=torch.int32)

    def t_bool(v):
        return torch.tensor(v, dtype=torch.bool)

    def t_table(rows):
        return torch.tensor(rows, dtype=torch.int32).reshape(len(rows), -1)

    results, _ = cu.run_case(case, t_int, t_int, t_bool, t_table, array_type="torch")
    return results, torch


@pytest.mark.parametrize("case", CASES, ids=cu.case_id)
def test_case_torch_outputs(case):
    """Every case with torch tensors in and out."""
    results, _ = run_with_torch(case)
    cu.assert_matches(case, results, lambda a: a.numpy())


def test_torch_outputs_are_tensors_of_vllms_dtypes():
    results, torch = run_with_torch(CASES[0])
    md = results[0]
    assert isinstance(md.non_spec_state_indices_tensor, torch.Tensor)
    assert md.non_spec_state_indices_tensor.dtype == torch.int32
    assert md.has_initial_state.dtype == torch.bool
