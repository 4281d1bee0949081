"""The Python API on the host target: input checks, errors, zero-copy views and
their lifetime, persistent buffers, keyword mapping. numpy only (no torch)."""

import gc
import types

import numpy as np
import pytest

import linmeta

I32 = np.int32


def step(**over):
    """SPEC example E1: 2 decodes + 2 prefills (no spec)."""
    kw = dict(
        query_start_loc_cpu=np.array([0, 1, 2, 18, 26], I32),
        query_start_loc=np.array([0, 1, 2, 18, 26], I32),
        seq_lens=np.array([10, 20, 40, 8], I32),
        seq_lens_cpu_upper_bound=np.array([10, 20, 40, 8], I32),
        num_actual_tokens=26,
        block_table=np.array([[10, 20, 30], [40, 50, 60], [70, 80, 90], [100, 110, 120]], I32),
    )
    kw.update(over)
    return kw


def spec_step(**over):
    """Pure spec decode, k = 2: two rows of 3 tokens, one padding row."""
    kw = dict(
        query_start_loc_cpu=np.array([0, 3, 6, 6], I32),
        seq_lens=np.array([20, 30, 0], I32),
        seq_lens_cpu_upper_bound=np.array([20, 30, 0], I32),
        num_actual_tokens=6,
        num_decode_draft_tokens_cpu=np.array([2, 2, -1], I32),
        num_accepted_tokens=np.array([1, 3, 1], I32),
        block_table=np.arange(100, 112, dtype=I32).reshape(3, 4),
    )
    kw.update(over)
    return kw


def gdn(**cfg):
    kw = dict(max_num_seqs=8, max_num_batched_tokens=64)
    kw.update(cfg)
    return linmeta.GdnMetadataBuilder(**kw)


def arr(x):
    return np.from_dlpack(x)


def data_ptr(x):
    return arr(x).__array_interface__["data"][0]


# --- basic behaviour ---------------------------------------------------------------


def test_example_e1_fields():
    md = gdn().build(**step())
    assert isinstance(md, linmeta.Metadata)
    assert (md.num_prefills, md.num_prefill_tokens, md.num_decodes, md.num_decode_tokens) == (2, 24, 2, 2)
    assert (md.num_spec_decodes, md.num_spec_decode_tokens, md.num_actual_tokens) == (0, 0, 26)
    assert arr(md.non_spec_state_indices_tensor).tolist() == [10, 40, 70, 100]
    assert arr(md.prefill_state_indices).tolist() == [70, 100]
    assert arr(md.has_initial_state).dtype == np.bool_
    assert arr(md.chunk_indices).shape == (2, 2)
    assert md.spec_state_indices_tensor is None
    assert md.uniform_spec_sequence_length is None
    assert md.recoverssm_commit is None and md.checkpoint is None
    nd = md.nums_dict
    assert list(nd) == [8]
    assert set(nd[8]) == {"nums", "tot", "mlist", "mlist_len", "offsetlist", "batch_ptr",
                          "token_chunk_offset_ptr"}
    assert nd[8]["tot"] == nd[8]["mlist_len"] == 5
    assert arr(nd[8]["nums"]).tolist() == [1, 1, 2, 1]
    assert arr(md.batch_ptr)[:5].tolist() == [0, 1, 2, 2, 3]
    # vLLM's nums_dict carries the program arrays themselves.
    assert nd[8]["batch_ptr"] is md.batch_ptr
    assert nd[8]["token_chunk_offset_ptr"] is md.token_chunk_offset_ptr
    assert "num_prefills=2" in repr(md)


def test_spec_fields_and_uniform_length():
    md = gdn(num_spec=2).build(**spec_step())
    assert (md.num_spec_decodes, md.num_spec_decode_tokens) == (2, 6)
    assert arr(md.spec_state_indices_tensor).tolist() == [[100, 101, 102], [104, 105, 106]]
    assert arr(md.spec_query_start_loc).tolist() == [0, 3, 6]
    assert arr(md.num_accepted_tokens).tolist() == [1, 3]
    assert md.uniform_spec_sequence_length == 3
    assert md.non_spec_state_indices_tensor is None


def test_fields_are_cached_views():
    md = gdn().build(**step())
    assert md.non_spec_state_indices_tensor is md.non_spec_state_indices_tensor
    assert md.nums_dict is md.nums_dict


def test_query_start_loc_defaults_to_host_copy_on_host_target():
    kw = step()
    del kw["query_start_loc"]
    md = gdn().build(**kw)
    assert arr(md.non_spec_query_start_loc).tolist() == [0, 1, 2, 18, 26]


def test_is_prefilling_bool():
    # Fresh-prompt rule: a 1-token prompt with is_prefilling counts as a prefill.
    kw = step(
        query_start_loc_cpu=np.array([0, 1, 2], I32),
        query_start_loc=np.array([0, 1, 2], I32),
        seq_lens=np.array([5, 1], I32),
        seq_lens_cpu_upper_bound=np.array([5, 1], I32),
        num_actual_tokens=2,
        block_table=np.array([[1, 2], [3, 4]], I32),
        is_prefilling=np.array([False, True]),
    )
    md = gdn().build(**kw)
    assert (md.num_decodes, md.num_prefills) == (1, 1)
    kw["is_prefilling"] = np.array([0, 1], I32)
    with pytest.raises(TypeError, match="is_prefilling: expected dtype bool, got int32"):
        gdn().build(**kw)


def test_kda_builder():
    b = linmeta.KdaMetadataBuilder(max_num_seqs=8, max_num_batched_tokens=64)
    assert b.kind == "kda"
    md = b.build(**step())
    assert md.chunk_indices is None  # KDA has no chunk metadata
    assert md.recoverssm_commit is None and md.checkpoint is None


def test_builder_properties():
    b = gdn(num_spec=3, full_cuda_graph=True, mamba_cache_mode="all", block_size=64, max_cudagraph_capture_size=16)
    assert b.kind == "gdn" and b.target == "host" and b.device is None and b.num_groups == 1
    assert b.config["mamba_cache_mode"] == "all"
    assert b.config["max_cudagraph_capture_size"] == 16
    assert b.decode_cudagraph_max_bs == 16
    assert b.buffer_bytes > 0
    b.build(**step())
    assert set(b.last_timing) == {"plan_ns", "pack_ns", "enqueue_ns", "metadata_ns"}
    assert isinstance(b, linmeta.MetadataBuilder)


# --- zero copy, lifetime, persistent buffers ------------------------------------------


def test_views_alias_builder_buffers_and_keep_builder_alive():
    b = gdn()
    md = b.build(**step())
    view = arr(md.non_spec_state_indices_tensor)
    assert view.flags["C_CONTIGUOUS"]
    del b, md
    gc.collect()
    assert view.tolist() == [10, 40, 70, 100]  # the builder lives while a view does
    assert md_builder_alive(view)


def md_builder_alive(view):
    return view.base is not None


def test_views_are_writable_aliases():
    b = gdn()
    md = b.build(**step())
    # numpy < 2 makes from_dlpack arrays read-only: write through the buffer protocol.
    a1 = np.asarray(md.non_spec_state_indices_tensor)
    a2 = arr(md.non_spec_state_indices_tensor)
    a1[0] = 7
    assert a2[0] == 7


def test_full_graph_outputs_keep_their_addresses():
    b = gdn(full_cuda_graph=True)
    decode = dict(
        query_start_loc_cpu=np.array([0, 1, 2, 2], I32),
        seq_lens=np.array([10, 20, 0], I32),
        seq_lens_cpu_upper_bound=np.array([10, 20, 0], I32),
        num_actual_tokens=2,
        block_table=np.array([[10, 20], [30, 40], [50, 60]], I32),
    )
    md1 = b.build(**decode)
    p1 = data_ptr(md1.non_spec_state_indices_tensor)
    assert arr(md1.non_spec_state_indices_tensor).tolist() == [10, 30, 50]
    decode["block_table"] = np.array([[11, 20], [31, 40], [51, 60]], I32)
    md2 = b.build(**decode)
    assert data_ptr(md2.non_spec_state_indices_tensor) == p1
    assert arr(md2.non_spec_state_indices_tensor).tolist() == [11, 31, 51]


def test_inputs_are_not_copied_strided_block_table():
    wide = np.arange(4 * 10, dtype=I32).reshape(4, 10) + 1000
    view = wide[:, :3]  # row stride 10, width 3
    md = gdn().build(**step(block_table=view))
    assert arr(md.non_spec_state_indices_tensor).tolist() == [1000, 1010, 1020, 1030]


def test_block_table_may_have_extra_rows():
    bt = np.arange(8 * 3, dtype=I32).reshape(8, 3)
    md = gdn().build(**step(block_table=bt))
    assert arr(md.non_spec_state_indices_tensor).tolist() == [0, 3, 6, 9]


def test_num_reqs_allows_longer_buffers():
    kw = step(
        query_start_loc_cpu=np.array([0, 1, 2, 18, 26, 99, 99], I32),
        query_start_loc=np.array([0, 1, 2, 18, 26, 99, 99], I32),
        seq_lens=np.array([10, 20, 40, 8, 77, 77], I32),
        seq_lens_cpu_upper_bound=np.array([10, 20, 40, 8, 77, 77], I32),
    )
    md = gdn().build(num_reqs=4, **kw)
    assert arr(md.non_spec_state_indices_tensor).tolist() == [10, 40, 70, 100]
    kw["query_start_loc_cpu"] = kw["query_start_loc"] = np.array([0, 1, 2, 18, 26], I32)
    with pytest.raises(linmeta.Error, match="seq_lens_cpu_upper_bound has 6 entries, expected num_reqs = 4"):
        gdn().build(**kw)  # num_reqs from query_start_loc_cpu: lengths must match


class ArrayInterfaceOnly:
    """Exposes nothing but __array_interface__ (no buffer protocol, no DLPack)."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


def test_array_interface_producer():
    kw = step()
    kw = {k: ArrayInterfaceOnly(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    md = gdn().build(**kw)
    assert arr(md.non_spec_state_indices_tensor).tolist() == [10, 40, 70, 100]
    wide = np.arange(40, dtype=I32).reshape(4, 10)
    md = gdn().build(**step(block_table=ArrayInterfaceOnly(wide[:, :2])))
    assert arr(md.non_spec_state_indices_tensor).tolist() == [0, 10, 20, 30]


def test_memoryview_input():
    kw = step(seq_lens=memoryview(np.array([10, 20, 40, 8], I32)))
    md = gdn().build(**kw)
    assert arr(md.has_initial_state).tolist() == [True, True, True, False]


# --- input errors ----------------------------------------------------------------------


def test_wrong_dtype_is_type_error():
    with pytest.raises(TypeError, match=r"seq_lens: expected dtype int32, got int64"):
        gdn().build(**step(seq_lens=np.array([10, 20, 40, 8], np.int64)))
    with pytest.raises(TypeError, match=r"block_table: expected dtype int32, got float32"):
        gdn().build(**step(block_table=np.zeros((4, 3), np.float32)))


def test_not_an_array_is_type_error():
    with pytest.raises(TypeError, match=r"seq_lens: expected an array .* got <class 'list'>"):
        gdn().build(**step(seq_lens=[10, 20, 40, 8]))


def test_a_sparse_tensor_is_type_error():
    torch = pytest.importorskip("torch")
    sparse = torch.tensor([10, 20, 40, 8], dtype=torch.int32).to_sparse()
    with pytest.raises(TypeError, match=r"seq_lens: expected an array .* got .*Tensor"):
        gdn().build(**step(seq_lens=sparse))


def test_non_contiguous_1d_is_rejected():
    base = np.array([10, 0, 20, 0, 40, 0, 8, 0], I32)
    with pytest.raises(linmeta.Error, match=r"seq_lens must be contiguous \(stride 1\), got stride 2"):
        gdn().build(**step(seq_lens=base[::2]))


def test_block_table_columns_must_be_contiguous():
    bt = np.arange(4 * 6, dtype=I32).reshape(4, 6)[:, ::2]
    with pytest.raises(ValueError, match=r"block_table must have contiguous rows \(stride\(1\) == 1\)"):
        gdn().build(**step(block_table=bt))
    with pytest.raises(ValueError, match="block_table: expected a 2-D array, got 1-D"):
        gdn().build(**step(block_table=np.arange(4, dtype=I32)))


def test_block_table_too_few_rows():
    with pytest.raises(linmeta.Error, match="block_table has 2 rows, the step has num_reqs = 4"):
        gdn().build(**step(block_table=np.zeros((2, 3), I32)))


def test_missing_required_argument():
    kw = step()
    del kw["seq_lens"]
    with pytest.raises(TypeError, match="incompatible function arguments"):
        gdn().build(**kw)
    with pytest.raises(linmeta.Error, match="block_table is required"):
        gdn().build(**step(block_table=None))


def test_library_errors_carry_the_cpp_message():
    bad = np.array([0, 1, 0, 18, 26], I32)
    with pytest.raises(linmeta.Error, match=r"query_start_loc_cpu decreases at row 1") as ei:
        gdn().build(**step(query_start_loc_cpu=bad, query_start_loc=bad))
    assert isinstance(ei.value, ValueError)
    with pytest.raises(linmeta.Error, match="num_actual_tokens = 20 is below"):
        gdn().build(**step(num_actual_tokens=20))
    with pytest.raises(linmeta.Error, match="exceeds the capacity max_num_seqs = 2"):
        gdn(max_num_seqs=2).build(**step())


def test_config_errors():
    with pytest.raises(linmeta.Error, match="use_recoverssm is a KDA option"):
        linmeta.GdnMetadataBuilder(use_recoverssm=True)
    with pytest.raises(linmeta.Error, match="mamba_cache_mode = 'sometimes'"):
        linmeta.GdnMetadataBuilder(mamba_cache_mode="sometimes")
    with pytest.raises(linmeta.Error, match="target = 'tpu'"):
        linmeta.GdnMetadataBuilder(target="tpu")
    with pytest.raises(linmeta.Error, match="array_type = 'jax'"):
        linmeta.GdnMetadataBuilder(array_type="jax")
    with pytest.raises(linmeta.Error, match="max_num_seqs = 0 must be positive"):
        linmeta.GdnMetadataBuilder(max_num_seqs=0)
    with pytest.raises(TypeError, match="positional argument"):
        linmeta.GdnMetadataBuilder(8)  # keyword-only
    with pytest.raises(TypeError, match="incompatible function arguments"):
        linmeta.MetadataBuilder()


def test_stream_argument():
    gdn().build(stream=0, **step())
    gdn().build(stream=None, **step())
    with pytest.raises(TypeError, match="stream must be an int"):
        gdn().build(stream="default", **step())


def test_cuda_target_without_device():
    if linmeta.cuda_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(linmeta.Error, match="(?i)cuda"):
        linmeta.GdnMetadataBuilder(target="cuda")


def test_numpy_array_type_needs_host_target():
    with pytest.raises(linmeta.Error, match="array_type = 'numpy' needs target = 'host'"):
        linmeta.GdnMetadataBuilder(target="cuda", array_type="numpy")


# --- groups and update_block_table -----------------------------------------------------


def test_build_groups_returns_one_metadata_per_group():
    b = gdn(num_groups=3)
    kw = step()
    del kw["block_table"]
    tabs = [np.arange(12, dtype=I32).reshape(4, 3) + 100 * g for g in range(3)]
    mds = b.build_groups(block_tables=tabs, **kw)
    assert [m.group for m in mds] == [0, 1, 2]
    for g, m in enumerate(mds):
        assert arr(m.non_spec_state_indices_tensor).tolist() == [100 * g + 0, 100 * g + 3, 100 * g + 6, 100 * g + 9]
        assert m.num_prefills == 2
    with pytest.raises(linmeta.Error, match="2 block tables given, the builder serves num_groups = 3"):
        b.build_groups(block_tables=tabs[:2], **kw)
    with pytest.raises(TypeError, match="block_tables must be a sequence"):
        b.build_groups(block_tables=None, **kw)
    with pytest.raises(linmeta.Error, match="num_groups = 3"):
        b.build(**step())


def test_update_block_table():
    b = gdn(num_groups=2)
    kw = step()
    del kw["block_table"]
    t0 = np.arange(12, dtype=I32).reshape(4, 3)
    t1 = t0 + 500
    m0, m1 = b.build_groups(block_tables=[t0, t0], **kw)
    m1b = b.update_block_table(m0, t1, group=1)
    assert m1b.group == 1
    assert arr(m1b.non_spec_state_indices_tensor).tolist() == [500, 503, 506, 509]
    assert arr(m1b.prefill_state_indices).tolist() == [506, 509]
    assert arr(m0.non_spec_state_indices_tensor).tolist() == [0, 3, 6, 9]  # group 0 untouched
    assert m1b.num_prefills == m0.num_prefills
    other = gdn(num_groups=2)
    with pytest.raises(linmeta.Error, match="metadata built by this builder"):
        other.update_block_table(m0, t1)
    with pytest.raises(linmeta.Error, match="group = 2 is outside"):
        b.update_block_table(m0, t1, group=2)


def test_kda_recoverssm_commit_align_block_table_is_callers_array():
    b = linmeta.KdaMetadataBuilder(num_spec=1, max_num_seqs=8, max_num_batched_tokens=64, use_recoverssm=True,
                                   mamba_cache_mode="align", block_size=16, num_speculative_blocks=0)
    bt = np.arange(2 * 4, dtype=I32).reshape(2, 4) + 10
    md = b.build(
        query_start_loc_cpu=np.array([0, 2, 4], I32),
        seq_lens=np.array([20, 33], I32),
        seq_lens_cpu_upper_bound=np.array([20, 33], I32),
        num_actual_tokens=4,
        is_prefilling=np.array([False, False]),
        num_decode_draft_tokens_cpu=np.array([1, 1], I32),
        num_accepted_tokens=np.array([1, 2], I32),
        block_table=bt,
    )
    rc = md.recoverssm_commit
    assert isinstance(rc, types.SimpleNamespace)
    assert rc.align is not None and rc.align.block_table is bt
    assert rc.align.block_size == 16
    assert arr(rc.align.num_computed_tokens).tolist() == [18, 31]
    assert arr(rc.state_indices).tolist() == arr(md.spec_state_indices_tensor).tolist()


# --- vLLM keyword mapping --------------------------------------------------------------


def test_step_kwargs_from_common_attn_metadata():
    s = step()
    common = types.SimpleNamespace(
        query_start_loc=s["query_start_loc"],
        query_start_loc_cpu=s["query_start_loc_cpu"],
        seq_lens=s["seq_lens"],
        seq_lens_cpu_upper_bound=s["seq_lens_cpu_upper_bound"],
        block_table_tensor=s["block_table"],
        num_actual_tokens=26,
        num_reqs=4,
        is_prefilling=None,
    )
    md = gdn().build(**linmeta.step_kwargs(common))
    assert arr(md.non_spec_state_indices_tensor).tolist() == [10, 40, 70, 100]


def test_read_only_inputs():
    kw = step()
    for v in kw.values():
        if isinstance(v, np.ndarray):
            v.setflags(write=False)
    md = gdn().build(**kw)
    assert arr(md.non_spec_state_indices_tensor).tolist() == [10, 40, 70, 100]


def test_scalar_like_counts():
    md = gdn().build(**step(num_actual_tokens=np.int64(26)))
    assert md.num_actual_tokens == 26
    with pytest.raises(linmeta.Error, match="does not fit in int32"):
        gdn().build(**step(num_actual_tokens=2**40))
