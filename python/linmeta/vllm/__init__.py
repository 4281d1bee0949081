"""linmeta.vllm: drop-in replacements for vLLM's linear-attention / SSM metadata builders.

Each class takes the constructor and call signatures of the vLLM builder it replaces, reads
the same configuration, and returns vLLM's own metadata dataclass (made from linmeta's output
table where vLLM is not importable) with every field equal to vLLM's: values, dtypes, shapes,
devices and None-ness. A class falls back to vLLM's own builder, with one log line, for a
configuration linmeta does not serve.

Each builder object (one per KV-cache group) has its own native engine and builder: nothing
is shared between builder objects, every call reads its inputs afresh and hands out new view
objects, and a call entered while another of the same object runs is refused. docs/vllm.md.
"""

from .. import _linmeta
from ._common import profile, register_with_vllm, set_profile
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

#: What the builders raise where vLLM's raise AssertionError or RuntimeError (its assertions,
#: torch's errors): a linmeta.Error (ValueError) that is also an AssertionError and a
#: RuntimeError, so that an ``except`` clause for vLLM's exception catches it too.
Error = _linmeta.vllm.Error

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
    "Error",
    "GDNAttentionMetadataBuilder",
    "InklingSconvMetadataBuilder",
    "KimiK3KDAMetadataBuilder",
    "LinearAttentionMetadataBuilder",
    "Mamba1AttentionMetadataBuilder",
    "Mamba2AttentionMetadataBuilder",
    "PleShortConvAttentionMetadataBuilder",
    "ShortConvAttentionMetadataBuilder",
    "profile",
    "set_profile",
]
