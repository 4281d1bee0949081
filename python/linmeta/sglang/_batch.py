"""What linmeta.sglang hands its native engine besides SGLang's own objects: the entry point
(SglangEntry, linmeta/sglang.hpp) and the batch of a CPU-graph capture. Imports nothing of
SGLang, so tests can drive the engine where SGLang is not installed."""

from __future__ import annotations

from types import SimpleNamespace

# SglangEntry (linmeta/sglang.hpp).
EAGER, GRAPH_CAPTURE, GRAPH_REPLAY, CPU_GRAPH_CAPTURE, PREFILL_GRAPH = 0, 1, 2, 3, 4


def cpu_capture_batch(bs, num_tokens, req_pool_indices, seq_lens, forward_mode, spec_info):
    """The ForwardBatch attributes init_forward_metadata_capture_cpu_graph hands over."""
    return SimpleNamespace(
        forward_mode=forward_mode,
        logical_forward_mode=forward_mode,
        batch_size=bs,
        req_pool_indices=req_pool_indices,
        input_ids=SimpleNamespace(shape=(num_tokens,)),
        extend_num_tokens=None,
        extend_seq_lens_cpu=None,
        extend_prefix_lens_cpu=None,
        seq_lens_cpu=None,
        spec_info=spec_info,
    )
