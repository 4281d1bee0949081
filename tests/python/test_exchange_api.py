"""Inputs read through the DLPack C exchange API (python/src/binding/dlpack_exchange.hpp),
the path of torch >= 2.11's tensors, with a ctypes producer over numpy (exchange_producer.py):
every case file's steps give what the same numpy arrays give, and a table that is not usable
(another major version, another capsule name, a failing export) leaves the object to the
other imports."""

import numpy as np
import pytest

import case_util as cu
import exchange_producer as ep
import linmeta

CASES = cu.all_cases()
Exchange = ep.producer_class()
Compact = ep.producer_class("CompactExchange", strides=False)
Offset = ep.producer_class("OffsetExchange", byte_offset=64)


def wrap(cls):
    def host(v):
        return cls(np.asarray(v, dtype=np.int32))

    def host_bool(v):
        return cls(np.asarray(v, dtype=np.bool_))

    def table(rows):
        return cls(np.asarray(rows, dtype=np.int32).reshape(len(rows), -1))

    return host, host_bool, table


def to_numpy(a):
    """An output view, or an input handed back (the caller's own object)."""
    return a.array if hasattr(a, "array") else np.from_dlpack(a)


@pytest.mark.parametrize("case", CASES, ids=cu.case_id)
def test_case_through_the_exchange_api(case):
    host, host_bool, table = wrap(Exchange)
    results, _ = cu.run_case(case, host, host, host_bool, table)
    cu.assert_matches(case, results, to_numpy)


@pytest.mark.parametrize("cls", [Compact, Offset], ids=["null-strides", "byte-offset"])
def test_compact_and_offset_tensors(cls):
    """DLTensor.strides null (compact, row-major) and a non-zero byte_offset read right."""
    for case in CASES[:40]:
        host, host_bool, table = wrap(cls)
        results, _ = cu.run_case(case, host, host, host_bool, table)
        cu.assert_matches(case, results, to_numpy)


def e1(**over):
    kw = dict(query_start_loc_cpu=[0, 1, 2, 18, 26], seq_lens=[10, 20, 40, 8],
              seq_lens_cpu_upper_bound=[10, 20, 40, 8],
              block_table=[[10, 20, 30], [40, 50, 60], [70, 80, 90], [100, 110, 120]])
    kw.update(over)
    return {k: Exchange(np.asarray(v, dtype=np.int32)) for k, v in kw.items()}


def build(**kw):
    b = linmeta.GdnMetadataBuilder(max_num_seqs=8, max_num_batched_tokens=64)
    return b.build(num_actual_tokens=26, **kw)


def test_reads_what_the_table_describes():
    md = build(**e1())
    assert np.from_dlpack(md.non_spec_state_indices_tensor).tolist() == [10, 40, 70, 100]
    assert md.num_prefills == 2 and md.num_prefill_tokens == 24


def test_checks_apply_to_exchanged_arrays():
    kw = e1()
    kw["seq_lens"] = Exchange((np.arange(8, dtype=np.int32) + 5)[::2])  # stride 2
    with pytest.raises(linmeta.Error, match="seq_lens must be contiguous"):
        build(**kw)
    kw = e1()
    kw["seq_lens"] = Exchange(np.array([10, 20, 40, 8], dtype=np.float32))
    with pytest.raises(TypeError, match="seq_lens: expected dtype int32, got float32"):
        build(**kw)
    kw = e1()
    kw["block_table"] = Exchange(np.arange(12, dtype=np.int32).reshape(3, 4).T)  # stride(1) 4
    with pytest.raises(linmeta.Error, match=r"block_table must have contiguous rows"):
        build(**kw)


@pytest.mark.parametrize("cls", [
    ep.producer_class("Major2", major=2),
    ep.producer_class("OtherCapsule", capsule_name=b"something_else"),
    ep.producer_class("FailingExport", fail=True),
], ids=["major-2", "capsule-name", "export-fails"])
def test_unusable_tables_leave_the_object_to_the_other_imports(cls):
    """The object then has no other protocol: the generic import's TypeError names it."""
    kw = e1()
    kw["seq_lens"] = cls(np.array([10, 20, 40, 8], dtype=np.int32))
    with pytest.raises(TypeError, match=r"seq_lens: expected an array .* got .*" + cls.__name__):
        build(**kw)
