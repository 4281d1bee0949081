"""vLLM 0.34's InklingSconvMetadataBuilder (models/inkling/nvidia/sconv_swa_attn.py: Inkling's
short-conv streams kept as a sliding-window KV cache), built by linmeta: each padded token's
request (``seq_idx``) and its request's first token (``query_start``), the block table and the
slot mapping passed through (docs/semantics.md I1–I2). The AMD build of the model
(models/inkling/amd/) keeps vLLM's own builder: linmeta's device target is CUDA."""

from __future__ import annotations

import copy
import dataclasses
import functools
import typing

from ._common import AttentionCGSupport, Base, V034Builder, vllm_class
from .local import local_class

_MODULE = "vllm.models.inkling.nvidia.sconv_swa_attn"


@functools.cache
def _local_metadata():
    """Where vLLM is not importable: the output table's fields plus slot_mapping (the caller's
    tensor, which linmeta does not hold)."""
    field = ("slot_mapping", typing.Any, dataclasses.field(default=None))
    cls = dataclasses.make_dataclass("InklingSconvMetadata", [field], bases=(local_class("inkling"),))
    cls.__module__ = __name__
    return cls


class InklingSconvMetadataBuilder(V034Builder, Base):
    kind = "inkling"
    replaces = (_MODULE, "InklingSconvMetadataBuilder")
    _cudagraph_support = AttentionCGSupport.UNIFORM_BATCH

    def metadata_class(self):
        return vllm_class(_MODULE, "InklingSconvMetadata") or _local_metadata()

    def linmeta_config(self) -> dict:
        # The conv cache is a sliding-window KV cache: no Mamba state, no state slots.
        return dict(self.common_config(), profile="vllm-0.34", mamba_cache_mode="none",
                    num_speculative_blocks=0)

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        m = common_attn_metadata
        # vLLM's padded token count is the slot mapping's length (I1).
        padded = m.slot_mapping.shape[0]
        if padded != m.num_actual_tokens:
            m = copy.copy(m)
            m.num_actual_tokens = padded
        md = self._engine.build(m, None, None, False)
        md.slot_mapping = common_attn_metadata.slot_mapping[:padded]
        return md

    def build_for_cudagraph_capture(self, common_attn_metadata):
        # vLLM's base class: a plain build.
        return self.build(0, common_attn_metadata)
