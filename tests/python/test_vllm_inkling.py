"""linmeta.vllm's Inkling short-conv drop-in (InklingSconvMetadataBuilder) on CPU without vLLM,
against the real vLLM 0.34 wheel's outputs in tests/data/vllm034_inkling.jsonl
(scripts/vllm-diff.sh --builders inkling; docs/semantics.md I1–I2).

The builders are made from stand-in vllm_config / kv_cache_spec objects carrying what vLLM's
builder (and linmeta.vllm's) reads, every group's builder object before the first build, and
every group builds (vLLM's builder has no update_block_table); capture cases go through
build_for_cudagraph_capture. block_table and slot_mapping must be the caller's own tensors.
"""

import importlib
import types

import pytest

torch = pytest.importorskip("torch")

import case_util as cu  # noqa: E402
import linmeta  # noqa: E402
from test_vllm_mamba import CUDAGraphMode, common_metadata, to_numpy  # noqa: E402

FILES = ("vllm034_inkling",)
CASES = [c for c in cu.all_cases(FILES) if c["builder"] == "inkling"]
ERRORS = [c for c in cu.error_cases(FILES) if c["builder"] == "inkling"]
CPU = torch.device("cpu")
PASSED_THROUGH = ("block_table", "slot_mapping")


@pytest.fixture
def lv(monkeypatch):
    """linmeta.vllm under vLLM 0.34's rules (linmeta has no others for Inkling)."""
    mod = importlib.import_module("linmeta.vllm")
    monkeypatch.setattr(mod._common, "_profile", "vllm-0.34")
    return mod


def vllm_config(case):
    c = case["config"]
    k = int(c["num_spec"])
    return types.SimpleNamespace(
        scheduler_config=types.SimpleNamespace(
            max_num_seqs=int(c["max_num_seqs"]),
            max_num_batched_tokens=int(c["max_num_batched_tokens"])),
        compilation_config=types.SimpleNamespace(
            cudagraph_mode=CUDAGraphMode(bool(c["full_cuda_graph"])),
            max_cudagraph_capture_size=c["max_cudagraph_capture_size"]),
        speculative_config=types.SimpleNamespace(num_speculative_tokens=k) if k else None,
        num_speculative_tokens=k,
        # Inkling reads no cache mode: a hybrid engine's may be align.
        cache_config=types.SimpleNamespace(mamba_cache_mode="align"),
    )


def run(lv, case, ms=None):
    """Every group's builder object, then each group's build. Returns (results, inputs)."""
    ms = ms or common_metadata(case)[0]
    spec = types.SimpleNamespace(block_size=int(case["config"]["block_size"]))
    builders = [lv.InklingSconvMetadataBuilder(spec, [f"model.layers.{g}.sconv"],
                                                vllm_config(case), CPU) for g in range(len(ms))]
    out = []
    for b, m in zip(builders, ms):
        out.append(b.build_for_cudagraph_capture(m) if case["mode"] == "capture" else b.build(0, m))
    return out, ms


def test_case_files_loaded():
    assert len(CASES) >= 12 and len(ERRORS) >= 3
    assert any(c["mode"] == "capture" for c in CASES) and any("groups" in c["step"] for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=cu.case_id)
def test_case(lv, case):
    results, ms = run(lv, case)
    cu.assert_vllm_matches(case, results, to_numpy, skip=PASSED_THROUGH)
    for md, m in zip(results, ms):
        assert md.block_table is m.block_table_tensor
        assert md.slot_mapping.data_ptr() == m.slot_mapping.data_ptr()
        assert md.slot_mapping.shape == m.slot_mapping.shape


@pytest.mark.parametrize("case", ERRORS, ids=cu.case_id)
def test_error_case(lv, case):
    """A step past the builder's token capacity (vLLM: "seq_idx_out is too small")."""
    with pytest.raises(linmeta.Error, match="max_num_batched_tokens"):
        run(lv, case)


def test_padded_count_is_the_slot_mappings_length(lv):
    """vLLM's builder covers slot_mapping.shape[0] tokens, whatever num_actual_tokens says."""
    case = next(c for c in CASES if c["mode"] == "build" and "groups" not in c["step"]
                and c["step"]["num_actual_tokens"] > c["step"]["query_start_loc"][-1])
    m = common_metadata(case)[0][0]
    padded = m.num_actual_tokens
    m.num_actual_tokens = m.query_start_loc_cpu[-1].item()  # the real count only
    (md,), _ = run(lv, case, [m])
    cu.assert_vllm_matches(case, [md], to_numpy, skip=PASSED_THROUGH)
    assert md.seq_idx.shape[0] == padded and m.num_actual_tokens < padded
    assert md.slot_mapping.shape[0] == padded


def test_returns_the_local_dataclass_without_vllm(lv):
    """Without vLLM's Inkling model: linmeta's dataclass, vLLM's class name and fields."""
    cls = lv.InklingSconvMetadataBuilder
    if lv._common.vllm_class(*cls.replaces) is not None:
        pytest.skip("vLLM's Inkling model is importable")
    (md,), _ = run(lv, CASES[0])
    assert type(md).__name__ == "InklingSconvMetadata"
    assert set(md.__dataclass_fields__) == {"block_table", "slot_mapping", "seq_idx", "query_start"}


def test_seed_profile_is_refused_without_vllm(lv, monkeypatch):
    """Outside vLLM 0.34 linmeta falls back to vLLM's builder; without vLLM there is none."""
    monkeypatch.setattr(lv._common, "_profile", None)
    with pytest.raises(NotImplementedError, match="InklingSconvMetadataBuilder: linmeta has"):
        run(lv, CASES[0])
