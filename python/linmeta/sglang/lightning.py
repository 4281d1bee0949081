"""linmeta's SGLang LightningAttentionBackend: SGLang 0.5.23's class with its metadata entry
points built by linmeta's ``sglang_lightning`` kind (docs/sglang.md, "Lightning"). Everything
else (forward, the kernels, the graph buffers' allocation) is SGLang's."""

from __future__ import annotations

from sglang.srt.layers.attention.linear.lightning_backend import LightningAttentionBackend
from sglang.srt.layers.attention.linear.linear_metadata import BailingLinearMetadata

from ._common import Backend


class LinmetaLightningAttentionBackend(Backend, LightningAttentionBackend):
    KIND = "sglang_lightning"
    METADATA = BailingLinearMetadata
