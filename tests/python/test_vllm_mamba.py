"""linmeta.vllm's Mamba-family drop-ins (Mamba2, Mamba1, ShortConv and PLE, linear attention,
Bailing) on CPU
without vLLM, against the real vLLM 0.34 wheel's outputs recorded in tests/data
(vllm034_mamba_public.jsonl, vllm034_mamba.jsonl, vllm034_replayssm.jsonl and the error files:
docs/case-format.md).

The builders are made from stand-in vllm_config / kv_cache_spec objects carrying what vLLM's
builders (and linmeta.vllm's) read, and called as vLLM 0.34's model runner V2 calls them
(tests/vllm/wheel_mamba.py): every builder object made before the first build; group 0
builds (build_for_cudagraph_capture in capture mode); Mamba2 / ShortConv builds get the
spec-decode counts as keywords, Mamba1 / linear attention build(0, m); later KV-cache groups
go through update_block_table where the builder supports it, else build. With vLLM absent
(or only the seed oracle's stand-in, which has no Mamba modules) the results are the local
dataclasses made from linmeta's output table: every field, dtype and nested object must be
what vLLM recorded, exactly.

This module does not load the seed oracle; it takes linmeta.vllm as imported when each test
runs, so it works alone and in one session with test_vllm_oracle.py.
"""

import dataclasses
import gc
import importlib
import types
import typing
import weakref

import pytest

torch = pytest.importorskip("torch")

import case_util as cu  # noqa: E402
import linmeta  # noqa: E402

FILES = ("vllm034_mamba_public", "vllm034_mamba", "vllm034_replayssm")
ERROR_FILES = ("vllm034_mamba_public_errors", "vllm034_mamba", "vllm034_replayssm")
MAMBA_KINDS = ("mamba2", "mamba1", "short_conv", "linear", "bailing_linear", "ple_short_conv")
CASES = [c for c in cu.all_cases(FILES) if c["builder"] in MAMBA_KINDS]
ERRORS = [c for c in cu.error_cases(ERROR_FILES) if c["builder"] in MAMBA_KINDS]
MULTI = [c for c in CASES if "groups" in c["step"]]
CLASS_NAMES = {
    "mamba2": "Mamba2AttentionMetadataBuilder",
    "mamba1": "Mamba1AttentionMetadataBuilder",
    "short_conv": "ShortConvAttentionMetadataBuilder",
    "linear": "LinearAttentionMetadataBuilder",
    "bailing_linear": "BailingLinearAttentionMetadataBuilder",
    "ple_short_conv": "PleShortConvAttentionMetadataBuilder",
}
# Builders whose build() vLLM's runner hands the spec-decode counts (wheel_mamba.py).
GETS_SPEC_KWARGS = ("mamba2", "short_conv", "ple_short_conv")
CPU = torch.device("cpu")
# ReplaySSM's Triton path: the base-Mamba builders; linmeta's rows (the wheel harness records
# none of them where ReplaySSM is off) and vLLM's scratch fields (the adapter's buffers).
REPLAYSSM_KINDS = ("mamba2", "mamba1", "short_conv", "ple_short_conv")
REPLAYSSM_ROWS = ("replayssm_rows", "replayssm_seq_lens_d", "replayssm_align_block_size")
REPLAYSSM_SCRATCH = {"write_pos_d": "decode_write_pos_d", "is_flush_d": "decode_is_flush_d",
                     "bc_pre_scratch": "decode_bc_pre_scratch"}
# The case files' ReplaySSM page (tests/vllm/wheel_builders.py REPLAYSSM_SHAPE).
REPLAYSSM_NGROUPS, REPLAYSSM_BUFFER_LEN = 2, 16


@pytest.fixture
def lv(monkeypatch):
    """linmeta.vllm as imported now, under vLLM 0.34's rules (what LINMETA_VLLM_PROFILE=
    vllm-0.34 or a vLLM 0.34 settles; linmeta has no other Mamba rules)."""
    mod = importlib.import_module("linmeta.vllm")
    monkeypatch.setattr(mod._common, "_profile", "vllm-0.34")
    return mod


# ------------------------------------------------------------------------- stand-in objects


class CUDAGraphMode:
    """vLLM's CUDAGraphMode, as far as the builders read it."""

    def __init__(self, full: bool):
        self.full = full

    def has_full_cudagraphs(self) -> bool:
        return self.full


def vllm_config(case, **over):
    """What vLLM's Mamba builders (and linmeta.vllm's) read of a VllmConfig."""
    c = case["config"]
    k = int(c["num_spec"])
    chunk = c.get("chunk_size")
    vc = types.SimpleNamespace(
        scheduler_config=types.SimpleNamespace(
            max_num_seqs=int(c["max_num_seqs"]),
            max_num_batched_tokens=max(8192, case["step"]["num_actual_tokens"]),
        ),
        compilation_config=types.SimpleNamespace(
            cudagraph_mode=CUDAGraphMode(bool(c["full_cuda_graph"])),
            max_cudagraph_capture_size=c["max_cudagraph_capture_size"],
            static_forward_context={},
        ),
        speculative_config=types.SimpleNamespace(num_speculative_tokens=k,
                                                 parallel_drafting=False) if k else None,
        num_speculative_tokens=k,
        cache_config=types.SimpleNamespace(mamba_cache_mode=c["mamba_cache_mode"],
                                           use_replayssm=bool(c.get("use_replayssm")),
                                           replayssm_buffer_len=REPLAYSSM_BUFFER_LEN,
                                           use_kda_recoverssm=False),
        use_flashinfer_replayssm=False,
        model_config=types.SimpleNamespace(
            get_mamba_chunk_size=lambda: None if chunk is None else int(chunk)),
        parallel_config=types.SimpleNamespace(decode_context_parallel_size=1),
        additional_config={},
    )
    for name, value in over.items():
        obj = vc
        *path, leaf = name.split(".")
        for p in path:
            obj = getattr(obj, p)
        setattr(obj, leaf, value)
    return vc


def kv_cache_spec(case):
    """vLLM's MambaSpec, as far as the builders read it (prefill_checkpoint_alignment: the
    layer's, None when the case has none: no checkpoints)."""
    c = case["config"]
    return types.SimpleNamespace(
        block_size=int(c["block_size"]),
        mamba_cache_mode=c["mamba_cache_mode"],
        num_speculative_blocks=int(c["num_speculative_blocks"]),
        num_prefill_checkpoint_blocks=int(c["num_prefill_checkpoint_blocks"]),
        prefill_checkpoint_alignment=c.get("prefill_checkpoint_alignment"),
        # ReplaySSM's page: B_cache (ngroups, buffer, state) last (the builder reads ngroups).
        shapes=((1,), (1,), (1,), (1,), (REPLAYSSM_NGROUPS, REPLAYSSM_BUFFER_LEN, 16)),
    )


def i32(values):
    return torch.tensor(values, dtype=torch.int32)


def common_metadata(case):
    """One CommonAttentionMetadata per group (the same step tensors, each group's block
    table, and, as vLLM 0.34's runner makes them, a fresh slice of is_prefilling per group),
    and the step's (num_accepted_tokens, num_decode_draft_tokens_cpu)."""
    s = case["step"]
    qsl, upper = s["query_start_loc"], s["seq_lens_cpu_upper_bound"]
    n = len(s["seq_lens"])
    base = dict(
        query_start_loc=i32(qsl),
        query_start_loc_cpu=i32(qsl),
        seq_lens=i32(s["seq_lens"]),
        seq_lens_cpu_upper_bound=i32(upper),
        num_reqs=n,
        num_actual_tokens=int(s["num_actual_tokens"]),
        max_query_len=max((b - a for a, b in zip(qsl[:-1], qsl[1:])), default=0),
        max_seq_len=max(upper, default=0),
        slot_mapping=torch.zeros(int(s["num_actual_tokens"]), dtype=torch.int64),
        causal=True,
    )
    prefilling = None if s["is_prefilling"] is None else torch.tensor(
        s["is_prefilling"], dtype=torch.bool)
    ms = [types.SimpleNamespace(**base, block_table_tensor=i32(t).reshape(n, -1),
                                is_prefilling=None if prefilling is None else prefilling[:n])
          for t in cu.tables(case)]
    accepted = None if s["num_accepted_tokens"] is None else i32(s["num_accepted_tokens"])
    drafts = None if s["num_decode_draft_tokens_cpu"] is None else i32(
        s["num_decode_draft_tokens_cpu"])
    return ms, accepted, drafts


def builders_of(lv, case, groups, **over):
    cls = getattr(lv, CLASS_NAMES[case["builder"]])
    return [cls(kv_cache_spec(case), [f"model.layers.{g}.mixer"], vllm_config(case, **over),
                CPU) for g in range(groups)]


def call(b, case, m, accepted, drafts):
    """One build as vLLM 0.34's runner calls it (the counts sliced afresh for each call, as
    its get_extra_attn_kwargs does)."""
    if case["mode"] == "capture":
        return b.build_for_cudagraph_capture(m)
    if case["builder"] in GETS_SPEC_KWARGS:
        n = m.num_reqs
        return b.build(0, m, num_accepted_tokens=None if accepted is None else accepted[:n],
                       num_decode_draft_tokens_cpu=None if drafts is None else drafts[:n])
    if case["builder"] == "bailing_linear" and accepted is not None:
        return b.build(0, m, num_accepted_tokens=accepted[:m.num_reqs])  # as wheel_mamba.py
    return b.build(0, m)


def run(lv, case, every_group_builds=False):
    """The case's step through linmeta.vllm as MRV2 runs it (every_group_builds: each group
    builds, none takes update_block_table). Returns (metadata per group, builders)."""
    ms, accepted, drafts = common_metadata(case)
    builders = builders_of(lv, case, len(ms))
    out = []
    for g, (b, m) in enumerate(zip(builders, ms)):
        if g > 0 and b.supports_update_block_table and not every_group_builds:
            out.append(b.update_block_table(out[0], m.block_table_tensor, m.slot_mapping))
        else:
            out.append(call(b, case, m, accepted, drafts))
    return out, builders


def to_numpy(t):
    return t.numpy()


def unrecorded(case):
    """linmeta's ReplaySSM rows the wheel harness did not record for `case` (all where ReplaySSM
    is off; replayssm_seq_lens_d where unset, which linmeta-replay checks is None)."""
    return tuple(n for n in REPLAYSSM_ROWS if n not in case["expected"])


# ------------------------------------------------------------------------- the case files


def test_case_files_loaded():
    assert len(CASES) >= 128 + 86 and len(ERRORS) >= 4 + 9
    assert {c["builder"] for c in CASES} == set(MAMBA_KINDS)
    assert all(c["config"]["profile"] == "vllm-0.34" for c in CASES)
    assert len(MULTI) >= 16 and any(c["mode"] == "capture" for c in CASES)


@pytest.mark.parametrize("case", CASES, ids=cu.case_id)
def test_case(lv, case):
    results, builders = run(lv, case)
    cu.assert_vllm_matches(case, results, to_numpy, unrecorded(case))
    # Every builder object plans its own step: a build, or update_block_table of group 0's
    # metadata (a rebuild of that step with its own table).
    for g, b in enumerate(builders):
        stats = b._engine.stats
        rebuilt = g > 0 and b.supports_update_block_table
        assert (stats["plans"], stats["rebuilds"]) == (1, int(rebuilt)), g


@pytest.mark.parametrize("case", MULTI, ids=cu.case_id)
def test_multi_group_every_group_builds(lv, case):
    """Every group building (no update_block_table) gives the same metadata, each builder
    object planning its own step from its own slices of is_prefilling and the counts."""
    results, builders = run(lv, case, every_group_builds=True)
    cu.assert_vllm_matches(case, results, to_numpy, unrecorded(case))
    assert [b._engine.stats["plans"] for b in builders] == [1] * len(builders)


@pytest.mark.parametrize("case", ERRORS, ids=cu.case_id)
def test_error_case(lv, case):
    """A step vLLM 0.34's builder rejects (its assertions: capture batches no decode-only
    FULL graph holds) raises what an `except` clause for vLLM's exception there catches (the
    type the case file records) that is a linmeta.Error too (linmeta.vllm.Error)."""
    import builtins

    with pytest.raises(linmeta.Error, match=r"\S") as raised:
        run(lv, case)
    recorded = getattr(builtins, case["error"]["type"])
    assert isinstance(raised.value, recorded), (type(raised.value).__mro__, recorded)
    assert isinstance(raised.value, lv.Error)


# ----------------------------------------------------------------------------- the classes


@pytest.mark.parametrize("kind", MAMBA_KINDS)
def test_returns_local_dataclasses_without_vllm(lv, kind):
    """Without vLLM's Mamba modules (no vLLM, or the seed oracle's stand-in) the builders
    subclass the base class linmeta.vllm found and return linmeta's dataclass of the kind:
    every top-level field of the output table, None by default."""
    from linmeta.vllm.local import local_class

    case = next(c for c in CASES if c["builder"] == kind and "groups" not in c["step"])
    b = builders_of(lv, case, 1)[0]
    if lv._common.vllm_class(*type(b).replaces) is not None:
        pytest.skip("vLLM's Mamba builders are importable")
    assert type(b) is getattr(lv, CLASS_NAMES[kind])
    assert isinstance(b, lv._common.Base)
    md = run(lv, case)[0][0]
    assert type(md) is local_class(kind) and type(md).__module__ == "linmeta.vllm.local"
    assert [f for f in vars(md)] == [n for n in linmeta.fields_of(kind) if "." not in n]
    if kind == "mamba2" and md.checkpoint_meta is not None:
        assert isinstance(md.checkpoint_meta, dict)  # no vLLM dataclass for it either


def _attr_case(kind, spec):
    return next(c for c in CASES if c["builder"] == kind and bool(c["config"]["num_spec"]) == spec
                and c["config"]["max_cudagraph_capture_size"] is not None)


@pytest.mark.parametrize("kind", MAMBA_KINDS)
@pytest.mark.parametrize("spec", [False, True], ids=["k0", "spec"])
def test_builder_attributes_are_vllms(lv, kind, spec):
    """vLLM 0.34's attributes: the Mamba base builder's CUDA-graph support UNIFORM_BATCH
    (linear attention: UNIFORM_SINGLE_TOKEN_DECODE; Bailing answers UNIFORM_BATCH),
    reorder_batch_threshold 1 (1 + k with spec decode, except linear attention),
    update_block_table supported but under spec decode (linear attention, Bailing: never), decode_cudagraph_max_bs = min(max_num_seqs, capture size),
    Mamba2's chunk size from the model config."""
    try:
        case = _attr_case(kind, spec)
    except StopIteration:
        pytest.skip(f"no {kind} case with spec={spec}")
    c = case["config"]
    b = builders_of(lv, case, 1)[0]
    k = int(c["num_spec"])
    cg = lv._common.AttentionCGSupport
    assert b.kv_cache_spec.block_size == c["block_size"]
    assert b.layer_names == ["model.layers.0.mixer"]
    if kind == "linear":
        assert type(b)._cudagraph_support is cg.UNIFORM_SINGLE_TOKEN_DECODE
        assert b.reorder_batch_threshold == 1
        assert b.supports_update_block_table is False
        return
    if kind == "bailing_linear":  # its own get_cudagraph_support; the class attribute inherited
        assert type(b)._cudagraph_support is cg.UNIFORM_SINGLE_TOKEN_DECODE
        assert type(b).get_cudagraph_support(b.vllm_config, b.kv_cache_spec) is cg.UNIFORM_BATCH
        assert b.reorder_batch_threshold == 1 + k
        assert b.supports_update_block_table is False and b.supports_spec_decode_metadata
        assert b.num_spec_tokens == k and b.use_spec_decode == (k > 0)
        assert b.decode_cudagraph_max_bs == min(c["max_num_seqs"], c["max_cudagraph_capture_size"])
        return
    assert type(b)._cudagraph_support is cg.UNIFORM_BATCH
    assert b.reorder_batch_threshold == 1 + k
    if kind == "ple_short_conv":
        assert b.supports_update_block_table is False
        assert b.needs_causal_conv1d_metadata is False and b.num_spec == k
        cap = c["max_cudagraph_capture_size"]
        assert b.decode_cudagraph_max_tokens == min(c["max_num_seqs"] * (1 + k), cap)
        return
    assert b.supports_update_block_table is (k == 0)
    assert b.num_spec_tokens == k and b.use_spec_decode == (k > 0)
    assert b.decode_cudagraph_max_bs == min(c["max_num_seqs"], c["max_cudagraph_capture_size"])
    assert b.needs_causal_conv1d_metadata is True
    if kind == "mamba2":
        assert b.chunk_size == c["chunk_size"]


UNSUPPORTED = [
    pytest.param(None, {}, "linmeta has vLLM 0.34's", id="seed-profile"),
    pytest.param("vllm-0.34", {"cache_config.use_replayssm": True, "use_flashinfer_replayssm": True},
                 "FlashInfer ReplaySSM", id="flashinfer-replayssm"),
    pytest.param("vllm-0.34", {"speculative_config": types.SimpleNamespace(
        num_speculative_tokens=2, parallel_drafting=True)}, "parallel drafting",
        id="parallel-drafting"),
    pytest.param("vllm-0.34", {"parallel_config.decode_context_parallel_size": 2},
                 "decode context parallelism", id="dcp"),
]


@pytest.mark.parametrize("kind", MAMBA_KINDS)
@pytest.mark.parametrize("profile,over,reason", UNSUPPORTED)
def test_unsupported_configurations_are_refused_without_vllm(lv, monkeypatch, kind, profile,
                                                             over, reason):
    """A configuration linmeta does not serve falls back to vLLM's own builder; without vLLM
    there is none: NotImplementedError naming the reason. (Linear attention: the profile
    only; Bailing: not ReplaySSM.)"""
    case = next(c for c in CASES if c["builder"] == kind)
    cls = getattr(lv, CLASS_NAMES[kind])
    if lv._common.vllm_class(*cls.replaces) is not None:
        pytest.skip("vLLM's Mamba builders are importable")
    monkeypatch.setattr(lv._common, "_profile", profile)
    # Linear attention reads none of these; Bailing reads the spec-decode threshold only.
    if profile is not None and (kind == "linear" or (kind == "bailing_linear"
                                                     and "ReplaySSM" in reason)):
        builders_of(lv, case, 1, **over)
        return
    with pytest.raises(NotImplementedError, match=f"{CLASS_NAMES[kind]}: {reason}"):
        builders_of(lv, case, 1, **over)


def _with_scratch_fields(kind):
    """linmeta's dataclass of `kind` plus vLLM's three ReplaySSM scratch fields (the engine
    hands out only the fields the metadata class has)."""
    from linmeta.vllm.local import local_class

    fields = [(n, typing.Any, dataclasses.field(default=None)) for n in REPLAYSSM_SCRATCH]
    return dataclasses.make_dataclass(f"{kind}_with_scratch", fields, bases=(local_class(kind),))


@pytest.mark.parametrize("kind", REPLAYSSM_KINDS)
def test_replayssm_scratch_views(lv, monkeypatch, kind):
    """ReplaySSM's Triton path (docs/semantics.md M6): write_pos_d, is_flush_d and
    bc_pre_scratch are new views of the first replayssm_rows rows of the builder object's own
    persistent scratch (vLLM's sizes and dtypes), None where replayssm_rows is; on
    update_block_table another builder's metadata keeps its views unless the step is a
    FULL-graph decode step, which takes the updating builder's (vLLM's
    _update_metadata_for_cudagraph_capture)."""
    cases = [c for c in CASES if c["builder"] == kind and c["config"].get("use_replayssm")]
    assert cases, f"no ReplaySSM case of {kind}"
    cls = _with_scratch_fields(kind)
    monkeypatch.setattr(getattr(lv, CLASS_NAMES[kind]), "metadata_class", lambda self: cls)
    seen = 0
    for case in cases:
        c = case["config"]
        results, builders = run(lv, case)
        rows_of = max(c["max_num_seqs"], builders[0].decode_cudagraph_max_bs)
        for g, (md, b) in enumerate(zip(results, builders)):
            rows = md.replayssm_rows
            staged = (c["full_cuda_graph"] and md.num_prefills == 0
                      and md.num_decodes <= b.decode_cudagraph_max_bs)
            owner = b if g == 0 or staged or not b.supports_update_block_table else builders[0]
            assert rows == (md.num_decodes or None)
            for name, buffer in REPLAYSSM_SCRATCH.items():
                v, buf = getattr(md, name), getattr(owner, buffer)
                assert buf.shape[0] == rows_of
                if rows is None:
                    assert v is None
                    continue
                seen += 1
                assert v.data_ptr() == buf.data_ptr() and v.shape == (rows, *buf.shape[1:])
        b = builders[0]
        ms, accepted, drafts = common_metadata(case)
        again = call(b, case, ms[0], accepted, drafts)
        for name in REPLAYSSM_SCRATCH:  # a new view object per result, over the same memory
            v, w = getattr(results[0], name), getattr(again, name)
            assert (v is None) == (w is None) and (v is None or (
                v is not w and v.data_ptr() == w.data_ptr() and v.shape == w.shape))
        assert b.decode_write_pos_d.dtype == torch.int32 and not b.decode_write_pos_d.any()
        assert b.decode_is_flush_d.dtype == torch.int8 and not b.decode_is_flush_d.any()
        assert b.decode_bc_pre_scratch.dtype == torch.float32
        assert b.decode_bc_pre_scratch.shape[1:] == (REPLAYSSM_NGROUPS, REPLAYSSM_BUFFER_LEN)
    assert seen


def test_replayssm_is_the_mamba_base_builders_option_with_k0():
    """The core's config.use_replayssm: the Mamba base builders only, k = 0 (vLLM 0.34's Triton
    ReplaySSM; its speculative decoding is FlashInfer's, left to vLLM)."""
    base = dict(profile="vllm-0.34", max_num_seqs=8, max_num_batched_tokens=64)
    for kind in REPLAYSSM_KINDS:
        assert linmeta.MetadataBuilder(kind, use_replayssm=True, **base,
                                       **({"chunk_size": 64} if kind == "mamba2" else {}))
        with pytest.raises(linmeta.Error, match="use_replayssm with num_spec = 2"):
            linmeta.MetadataBuilder(kind, use_replayssm=True, num_spec=2, num_speculative_blocks=2,
                                    **base, **({"chunk_size": 64} if kind == "mamba2" else {}))
    for kind in ("linear", "bailing_linear", "inkling", "gdn", "kda"):
        with pytest.raises(linmeta.Error, match="use_replayssm is an option"):
            linmeta.MetadataBuilder(kind, use_replayssm=True, **base)


def test_mamba2_needs_the_chunk_size(lv):
    case = next(c for c in CASES if c["builder"] == "mamba2")
    with pytest.raises(AssertionError, match="chunk_size needs to be set"):
        builders_of(lv, case, 1, **{"model_config.get_mamba_chunk_size": lambda: None})


def test_build_signatures_are_vllms(lv):
    """Mamba2 / ShortConv take the spec-decode counts as keywords (MRV2 passes them so);
    linear attention's build() takes none, as vLLM's."""
    case = next(c for c in CASES if c["builder"] == "linear" and c["mode"] == "build"
                and "groups" not in c["step"])
    ms, accepted, drafts = common_metadata(case)
    b = builders_of(lv, case, 1)[0]
    want = cu.vllm_json(b.build(0, ms[0]), to_numpy)
    assert cu.vllm_json(b.build(0, ms[0], True), to_numpy) == want
    assert cu.vllm_json(b.build(common_prefix_len=0, common_attn_metadata=ms[0]),
                        to_numpy) == want
    with pytest.raises(TypeError, match="unexpected keyword argument 'num_accepted_tokens'"):
        b.build(0, ms[0], num_accepted_tokens=accepted)


@pytest.mark.parametrize("kind", MAMBA_KINDS)
def test_builders_and_native_builder_are_freed(lv, kind):
    """No reference cycle and no kept result: after builds (and update_block_table where
    supported), dropping the builder objects and their metadata frees the native builder."""
    case = next(c for c in MULTI if c["builder"] == kind and c["mode"] == "build")
    results, builders = run(lv, case)
    ms, accepted, drafts = common_metadata(case)
    for _ in range(3):
        results = [call(b, case, m, accepted, drafts) for b, m in zip(builders, ms)]
    native = weakref.ref(builders[0]._engine.builder)
    objs = [weakref.ref(b) for b in builders]
    gc.disable()
    try:
        del builders, results
        assert [r() for r in objs] == [None] * len(objs)
    finally:
        gc.enable()
    gc.collect()
    assert native() is None
