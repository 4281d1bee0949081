"""linmeta's SGLang Mamba2AttnBackend: SGLang 0.5.23's class with its metadata entry points
built by linmeta's ``sglang_mamba2`` kind (docs/sglang.md, "Mamba2"). Everything else
(forward, the kernels, the graph buffers' allocation) is SGLang's."""

from __future__ import annotations

from sglang.srt.layers.attention.hybrid_linear_attn_backend import Mamba2AttnBackend
from sglang.srt.layers.attention.mamba.mamba2_metadata import Mamba2Metadata

from ._common import Backend


class LinmetaMamba2AttnBackend(Backend, Mamba2AttnBackend):
    KIND = "sglang_mamba2"
    METADATA = Mamba2Metadata
    MIXED = Mamba2Metadata.MixedMetadata
