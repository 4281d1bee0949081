"""linmeta's SGLang Mamba2AttnBackend: SGLang 0.5.23's class with its metadata entry points
built by linmeta's ``sglang_mamba2`` kind (docs/sglang.md, "Mamba2"). Everything else
(forward, the kernels, the graph buffers' allocation) is SGLang's."""

from __future__ import annotations

from sglang.srt.layers.attention.hybrid_linear_attn_backend import Mamba2AttnBackend
from sglang.srt.layers.attention.mamba.mamba2_metadata import Mamba2Metadata

from ._common import (
    CPU_GRAPH_CAPTURE,
    EAGER,
    GRAPH_CAPTURE,
    GRAPH_REPLAY,
    Backend,
    cpu_capture_batch,
)


class LinmetaMamba2AttnBackend(Backend, Mamba2AttnBackend):
    KIND = "sglang_mamba2"
    METADATA = Mamba2Metadata
    MIXED = Mamba2Metadata.MixedMetadata

    def init_forward_metadata(self, forward_batch):
        if not self._linmeta_supported() or self._linmeta_ragged(forward_batch):
            return super().init_forward_metadata(forward_batch)
        self.forward_metadata = self._linmeta_build(forward_batch, EAGER, None)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False):
        if not self._linmeta_supported() or self._linmeta_ragged(forward_batch):
            return super().init_forward_metadata_out_graph(forward_batch, in_capture)
        fb = forward_batch
        tree = fb.forward_mode.is_target_verify() and self.topk > 1
        graph = self._linmeta_graph(fb.batch_size, getattr(fb, "mamba_track_indices", None), tree)
        entry = GRAPH_CAPTURE if in_capture else GRAPH_REPLAY
        self.forward_metadata = self._linmeta_build(fb, entry, graph)

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int):
        super().init_cuda_graph_state(max_bs, max_num_tokens)  # SGLang's static buffers

    def init_cpu_graph_state(self, max_bs: int, max_num_tokens: int):
        super().init_cpu_graph_state(max_bs, max_num_tokens)

    def init_forward_metadata_capture_cpu_graph(
        self, bs, num_tokens, req_pool_indices, seq_lens, out_cache_loc, encoder_lens,
        forward_mode, spec_info,
    ):
        if not self._linmeta_supported():
            return super().init_forward_metadata_capture_cpu_graph(
                bs, num_tokens, req_pool_indices, seq_lens, out_cache_loc, encoder_lens,
                forward_mode, spec_info)
        fb = cpu_capture_batch(bs, num_tokens, req_pool_indices, seq_lens, forward_mode, spec_info)
        graph = (self.state_indices_list[bs - 1], self.query_start_loc_list[bs - 1],
                 None, None, None, None)
        self.forward_metadata = self._linmeta_build(fb, CPU_GRAPH_CAPTURE, graph)
