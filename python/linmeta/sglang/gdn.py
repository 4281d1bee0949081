"""linmeta's SGLang GDNAttnBackend: SGLang 0.5.23's class with its metadata entry points built
by linmeta's ``sglang_gdn`` kind (docs/sglang.md, "GDN"). What stays SGLang's: multi-item
scoring and the FlashInfer prefill's checkpoint plan (steps with those take SGLang's own
method), the target-verify kernel routing (SGLang's ``_init_target_verify_qkv_routing``,
run on linmeta's metadata), the forward and its kernels."""

from __future__ import annotations

from sglang.srt.layers.attention.linear import gdn_backend
from sglang.srt.layers.attention.linear.gdn_backend import GDNAttnBackend
from sglang.srt.layers.attention.mamba.mamba2_metadata import ForwardMetadata

from ._batch import CPU_GRAPH_CAPTURE, EAGER
from ._common import Backend


class LinmetaGDNAttnBackend(Backend, GDNAttnBackend):
    KIND = "sglang_gdn"
    METADATA = ForwardMetadata

    def _linmeta_conv_block_table(self) -> bool:
        return gdn_backend.is_cuda()

    def _linmeta_serves(self, fb) -> bool:
        checkpoints = getattr(self, "_linmeta_checkpoints", None)
        if checkpoints is None:  # the backend's prefill kernel: fixed at construction
            checkpoints = self._linmeta_checkpoints = bool(
                self.kernel_dispatcher.extend_uses_state_checkpoints)
        return (
            not checkpoints
            and getattr(fb, "multi_item_delimiter_indices", None) is None
            and super()._linmeta_serves(fb)
        )

    def _linmeta_after(self, fb, entry: int, fields: dict) -> None:
        if entry == CPU_GRAPH_CAPTURE:  # SGLang's GDN does not override that entry
            return
        self._init_target_verify_qkv_routing(fb)
        if entry == EAGER:
            self.mis_metadata = None
