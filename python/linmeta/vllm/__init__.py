"""linmeta.vllm: drop-in replacements for vLLM's linear-attention / SSM metadata builders.

Each class takes the constructor and call signatures of the vLLM builder it replaces, reads
the same configuration, and returns vLLM's own metadata dataclass (made from linmeta's output
table where vLLM is not importable) with every field equal to vLLM's: values, dtypes, shapes,
devices and None-ness. A class falls back to vLLM's own builder, with one log line, for a
configuration linmeta does not serve.

The builder objects of one configuration (one per KV-cache group) share one native engine:
the first group's build() of a scheduler step plans the step and finishes every group in one
launch, the others are served from that plan. docs/vllm.md.
"""

from ._common import PROFILE, register_with_vllm
from .gdn import GDNAttentionMetadataBuilder, KimiK3KDAMetadataBuilder
from .inkling import InklingSconvMetadataBuilder
from .mamba import (
    BailingLinearAttentionMetadataBuilder,
    LinearAttentionMetadataBuilder,
    Mamba1AttentionMetadataBuilder,
    Mamba2AttentionMetadataBuilder,
    PleShortConvAttentionMetadataBuilder,
    ShortConvAttentionMetadataBuilder,
)

#: Every class of this package.
BUILDERS = (
    GDNAttentionMetadataBuilder,
    KimiK3KDAMetadataBuilder,
    Mamba2AttentionMetadataBuilder,
    Mamba1AttentionMetadataBuilder,
    ShortConvAttentionMetadataBuilder,
    LinearAttentionMetadataBuilder,
    BailingLinearAttentionMetadataBuilder,
    PleShortConvAttentionMetadataBuilder,
    InklingSconvMetadataBuilder,
)

register_with_vllm(BUILDERS)

__all__ = [
    "BUILDERS",
    "BailingLinearAttentionMetadataBuilder",
    "GDNAttentionMetadataBuilder",
    "InklingSconvMetadataBuilder",
    "KimiK3KDAMetadataBuilder",
    "LinearAttentionMetadataBuilder",
    "Mamba1AttentionMetadataBuilder",
    "Mamba2AttentionMetadataBuilder",
    "PROFILE",
    "PleShortConvAttentionMetadataBuilder",
    "ShortConvAttentionMetadataBuilder",
]
