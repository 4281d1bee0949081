"""The cuda target with torch tensors: every case of tests/data (every builder kind),
zero-copy outputs on the device, streams, __cuda_array_interface__ producers, CUDA-graph
capture. Skipped when torch or a CUDA device is unavailable."""

import gc

import pytest

import case_util as cu
import linmeta

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not (torch.cuda.is_available() and linmeta.cuda_available()), reason="needs a CUDA device"
    ),
]

CASES = cu.all_cases()
ERRORS = cu.error_cases()
# The case runs take torch outputs: torch < 2.0 (Debian's 1.13) has no bool DLPack import.
CUDA = dict(target="cuda", array_type="torch")


def host(v):
    return torch.tensor(v, dtype=torch.int32)


def host_bool(v):
    return torch.tensor(v, dtype=torch.bool)


def device(v):
    return torch.tensor(v, dtype=torch.int32, device="cuda")


def table(rows):
    return torch.tensor(rows, dtype=torch.int32, device="cuda").reshape(len(rows), -1)


def to_numpy(a):
    t = a if isinstance(a, torch.Tensor) else torch.from_dlpack(a)
    return t.cpu().numpy()


def torch_kernels_run():
    """Whether torch's own CUDA kernels run here. Under CUDA_FORCE_PTX_JIT=1 they do not (torch's
    wheel carries no PTX the driver can JIT for them: "no kernel image is available"), while
    linmeta's do; a test that needs torch kernels (graph capture) skips then, saying so."""
    try:
        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        return True
    except RuntimeError as e:  # torch.AcceleratorError is a RuntimeError
        if "no kernel image" not in str(e):
            raise
        return False


def sync_to_numpy(a):
    torch.cuda.synchronize()
    return to_numpy(a)


@pytest.mark.parametrize("case", CASES, ids=cu.case_id)
def test_case_cuda(case):
    results, _ = cu.run_case(case, host, device, host_bool, table, **CUDA)
    cu.assert_matches(case, results, sync_to_numpy)


@pytest.mark.parametrize("case", ERRORS, ids=cu.case_id)
def test_error_case_cuda(case):
    """Steps the reference rejects raise linmeta.Error on the cuda target too (before any
    launch); on a reference bug linmeta answers (the host test checks the answer)."""
    if case["error"]["type"] in ("ValueError", "TypeError", "AssertionError"):
        with pytest.raises(linmeta.Error, match=r"\S"):
            cu.run_case(case, host, device, host_bool, table, **CUDA)
    else:
        results, _ = cu.run_case(case, host, device, host_bool, table, **CUDA)
        torch.cuda.synchronize()
        assert results and all(md.num_spec_decodes == 0 for md in results)


@pytest.mark.parametrize("case", CASES[::10], ids=cu.case_id)
def test_case_cuda_pdl(case):
    """programmatic_dependent_launch=True gives the same outputs (the kernel waits on the
    grid dependency before reading the step's device inputs)."""
    results, _ = cu.run_case(
        case, host, device, host_bool, table, programmatic_dependent_launch=True, **CUDA
    )
    cu.assert_matches(case, results, sync_to_numpy)


MULTI = [c for c in CASES if "groups" in c["step"]]


@pytest.mark.parametrize("case", MULTI, ids=cu.case_id)
def test_multi_group_cuda_equals_independent(case):
    together, _ = cu.run_case(case, host, device, host_bool, table, **CUDA)
    apart, _ = cu.run_case(case, host, device, host_bool, table, independent=True, **CUDA)
    torch.cuda.synchronize()
    for a, b in zip(together, apart):
        assert cu.to_json(a, case["builder"], to_numpy) == cu.to_json(b, case["builder"], to_numpy)
    # Each group wrote its own buffers: group 0's views were not overwritten by later groups.
    cu.assert_matches(case, together, to_numpy)


@pytest.mark.parametrize("case", MULTI, ids=cu.case_id)
def test_update_block_table_cuda(case):
    """update_block_table(md, table g) on torch's current stream == group g's expected."""
    tabs = [table(t) for t in cu.tables(case)]
    b = linmeta.MetadataBuilder(case["builder"], **cu.config_kwargs(case), **CUDA)
    kw = cu.step_kwargs(case, host, device, host_bool)
    fn = b.build_for_cudagraph_capture if case.get("mode") == "capture" else b.build
    md0 = fn(block_table=tabs[0], stream=torch.cuda.current_stream(), **kw)
    exp = cu.expected_groups(case)
    for g in range(1, len(tabs)):
        md = b.update_block_table(md0, tabs[g], stream=torch.cuda.current_stream())
        assert md.group == 0
        torch.cuda.synchronize()
        bad = cu.mismatches(exp[g], cu.to_json(md, case["builder"], to_numpy))
        assert not bad, bad


def e1(**over):
    kw = dict(
        query_start_loc_cpu=host([0, 1, 2, 18, 26]),
        query_start_loc=device([0, 1, 2, 18, 26]),
        seq_lens=device([10, 20, 40, 8]),
        seq_lens_cpu_upper_bound=host([10, 20, 40, 8]),
        num_actual_tokens=26,
        block_table=table([[10, 20, 30], [40, 50, 60], [70, 80, 90], [100, 110, 120]]),
    )
    kw.update(over)
    return kw


def gdn(**cfg):
    kw = dict(max_num_seqs=8, max_num_batched_tokens=64, target="cuda")
    kw.update(cfg)
    return linmeta.GdnMetadataBuilder(**kw)


def test_outputs_are_device_views():
    b = gdn()
    md = b.build(stream=torch.cuda.current_stream().cuda_stream, **e1())
    x = md.non_spec_state_indices_tensor
    assert x.__dlpack_device__() == (2, torch.cuda.current_device())
    t = torch.from_dlpack(x)
    assert t.is_cuda and t.dtype == torch.int32
    assert t.tolist() == [10, 40, 70, 100]
    assert torch.from_dlpack(x).data_ptr() == t.data_ptr()  # an alias, not a copy
    assert b.device == torch.cuda.current_device()
    # host-memory field of the conv1d metadata
    nums = md.nums_dict[8]["nums"]
    assert nums.__dlpack_device__() == (1, 0)


def test_array_type_torch_and_lifetime():
    b = gdn(array_type="torch")
    md = b.build(**e1())
    t = md.non_spec_state_indices_tensor
    assert isinstance(t, torch.Tensor) and t.device.type == "cuda"
    assert md.has_initial_state.dtype == torch.bool
    del b, md
    gc.collect()
    torch.cuda.synchronize()
    assert t.tolist() == [10, 40, 70, 100]  # the tensor keeps the builder (and its buffers) alive


def test_full_graph_buffers_keep_addresses_cuda():
    b = gdn(full_cuda_graph=True, array_type="torch")
    kw = dict(
        query_start_loc_cpu=host([0, 1, 2, 2]),
        query_start_loc=device([0, 1, 2, 2]),
        seq_lens=device([10, 20, 0]),
        seq_lens_cpu_upper_bound=host([10, 20, 0]),
        num_actual_tokens=2,
        block_table=table([[10, 20], [30, 40], [50, 60]]),
    )
    p1 = b.build(**kw).non_spec_state_indices_tensor.data_ptr()
    kw["block_table"] = table([[11, 20], [31, 40], [51, 60]])
    md2 = b.build(**kw)
    assert md2.non_spec_state_indices_tensor.data_ptr() == p1
    assert md2.non_spec_state_indices_tensor.tolist() == [11, 31, 51]


def test_side_stream():
    s = torch.cuda.Stream()
    b = gdn(array_type="torch")
    with torch.cuda.stream(s):
        kw = e1()
        md = b.build(stream=s, **kw)
        out = md.non_spec_state_indices_tensor.clone()
    s.synchronize()
    assert out.tolist() == [10, 40, 70, 100]


class CudaArrayInterfaceOnly:
    def __init__(self, t):
        self._t = t
        self.__cuda_array_interface__ = t.__cuda_array_interface__


def test_cuda_array_interface_producer():
    kw = e1()
    for k in ("query_start_loc", "seq_lens", "block_table"):
        kw[k] = CudaArrayInterfaceOnly(kw[k])
    md = gdn().build(**kw)
    torch.cuda.synchronize()
    assert to_numpy(md.non_spec_state_indices_tensor).tolist() == [10, 40, 70, 100]


def test_strided_block_table_cuda():
    # Built on the host and copied: no torch kernel runs (see torch_kernels_run).
    wide = table([[1000 + 10 * r + c for c in range(10)] for r in range(4)])
    md = gdn().build(**e1(block_table=wide[:, :3]))
    torch.cuda.synchronize()
    assert to_numpy(md.non_spec_state_indices_tensor).tolist() == [1000, 1010, 1020, 1030]


def test_wrong_memory_is_rejected():
    with pytest.raises(linmeta.Error, match=r"seq_lens must be in CUDA device \d+ memory"):
        gdn().build(**e1(seq_lens=host([10, 20, 40, 8])))
    with pytest.raises(linmeta.Error, match=r"query_start_loc_cpu must be in host \(cpu\) memory"):
        gdn().build(**e1(query_start_loc_cpu=device([0, 1, 2, 18, 26])))
    with pytest.raises(TypeError, match="seq_lens: expected dtype int32, got int64"):
        gdn().build(**e1(seq_lens=torch.tensor([10, 20, 40, 8], device="cuda")))
    kw = e1()
    del kw["query_start_loc"]
    with pytest.raises(linmeta.Error, match="query_start_loc \\(device\\) is required"):
        gdn().build(**kw)


def test_cuda_graph_capture_and_replay():
    """A capture build recorded into a torch CUDA graph replays its finish work."""
    if not torch_kernels_run():
        pytest.skip("torch's graph capture launches torch kernels, which cannot run here")
    b = gdn(num_spec=1, full_cuda_graph=True, array_type="torch")
    qsl = device([0, 2, 4])
    seq_lens = device([10, 20])
    bt = table([[1, 2, 3], [4, 5, 6]])
    kw = dict(
        query_start_loc_cpu=host([0, 2, 4]),
        query_start_loc=qsl,
        seq_lens=seq_lens,
        seq_lens_cpu_upper_bound=host([10, 20]),
        num_actual_tokens=4,
        block_table=bt,
    )
    b.build_for_cudagraph_capture(**kw)  # warm-up outside the graph
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        md = b.build_for_cudagraph_capture(stream=torch.cuda.current_stream(), **kw)
    spec = md.spec_state_indices_tensor
    spec.zero_()
    g.replay()
    torch.cuda.synchronize()
    assert spec.tolist() == [[1, 2], [4, 5]]
    bt.copy_(table([[7, 8, 9], [10, 11, 12]]))  # graphs read the caller's table at replay
    g.replay()
    torch.cuda.synchronize()
    assert spec.tolist() == [[7, 8], [10, 11]]
