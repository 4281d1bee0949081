"""vLLM 0.34's Mamba-family metadata builders, built by linmeta: Mamba2 (Nemotron-H, Granite
4.0, Falcon-H1, Zamba2, Bamba), Mamba1 (Jamba, Falcon-Mamba), ShortConv (LFM2), linear
attention (MiniMax-Text-01 / M1) and its Bailing subclass (Ling hybrids). linmeta has vLLM
0.34's rules for them only."""

from __future__ import annotations

import torch

from ._common import AttentionCGSupport, Base, Builder, V034Builder, profile, vllm_class
from .local import local_class

_BACKENDS = "vllm.v1.attention.backends"
_CHECKPOINT = ("vllm.model_executor.layers.mamba.checkpoint", "MambaPrefillCheckpointMetadata")


def _threshold_unsupported(vllm_config) -> str | None:
    """Where vLLM's reorder_batch_threshold is not linmeta's 1 + k (or 1)."""
    spec = vllm_config.speculative_config
    if spec is not None and getattr(spec, "parallel_drafting", False):
        return "parallel drafting (decode threshold 1 + 2k)"
    dcp = getattr(getattr(vllm_config, "parallel_config", None), "decode_context_parallel_size", 1)
    if dcp > 1:
        return "decode context parallelism"
    return None


class _MambaBuilder(Builder, Base):
    """vLLM 0.34's BaseMambaAttentionMetadataBuilder (mamba_attn.py): its attributes, and
    build() / build_for_cudagraph_capture() / update_block_table() by linmeta."""

    module = ""  # vLLM's module of the builder, under vllm.v1.attention.backends
    metadata_name = ""
    _cudagraph_support = AttentionCGSupport.UNIFORM_BATCH
    reorder_batch_threshold: int = 1
    supports_update_block_table: bool = True
    needs_causal_conv1d_metadata: bool = True

    @classmethod
    def unsupported(cls, kv_cache_spec, vllm_config):
        if profile() != "vllm-0.34":
            return "linmeta has vLLM 0.34's Mamba rules only"
        if getattr(vllm_config, "use_flashinfer_replayssm", False):
            return "FlashInfer ReplaySSM (its scratch is FlashInfer's allocator's)"
        return _threshold_unsupported(vllm_config)

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.speculative_config = vllm_config.speculative_config
        self.compilation_config = vllm_config.compilation_config
        self.num_spec_tokens: int = vllm_config.num_speculative_tokens
        self.use_spec_decode = self.num_spec_tokens > 0
        # ReplaySSM: its Triton path (FlashInfer's is vLLM's: unsupported()).
        self.use_replayssm = bool(getattr(vllm_config.cache_config, "use_replayssm", False))
        self.replayssm_buffer_len = getattr(vllm_config.cache_config, "replayssm_buffer_len", 16)
        self.use_flashinfer_replayssm = False
        self.decode_bc_pre_scratch = None
        self.decode_replayssm_scratch = None
        self.decode_replayssm_state_indices_d = None
        self._init_reorder_batch_threshold(1, self.use_spec_decode)
        if self.use_spec_decode:
            self.supports_update_block_table = False
        self._join_engine(device, self._replayssm_scratch if self.use_replayssm else None)
        self.decode_cudagraph_max_bs: int = self._engine.builder.decode_cudagraph_max_bs

    def _replayssm_scratch(self, builder) -> dict:
        """ReplaySSM's persistent decode scratch as vLLM's builder allocates it
        (mamba_attn.py:142-165): per-row ring cursor and flush flag (zeros) and the B·C
        products, (rows, ngroups, replayssm_buffer_len) float32, ngroups from the MambaSpec's
        B_cache shape; rows = max(decode_cudagraph_max_bs, max_num_seqs). The model's
        kernels fill them; each result holds views of their first rows (the engine)."""
        rows = max(builder.decode_cudagraph_max_bs,
                   self.vllm_config.scheduler_config.max_num_seqs)
        ngroups = self.kv_cache_spec.shapes[4][0]
        self.decode_write_pos_d = torch.zeros((rows,), dtype=torch.int32, device=self.device)
        self.decode_is_flush_d = torch.zeros((rows,), dtype=torch.int8, device=self.device)
        self.decode_bc_pre_scratch = torch.empty((rows, ngroups, self.replayssm_buffer_len),
                                                 dtype=torch.float32, device=self.device)
        return {"write_pos_d": self.decode_write_pos_d, "is_flush_d": self.decode_is_flush_d,
                "bc_pre_scratch": self.decode_bc_pre_scratch}

    def metadata_class(self):
        return vllm_class(f"{_BACKENDS}.{self.module}", self.metadata_name) or local_class(self.kind)

    def linmeta_config(self) -> dict:
        return dict(self.common_config(), profile="vllm-0.34", use_replayssm=self.use_replayssm)


class Mamba2AttentionMetadataBuilder(_MambaBuilder):
    kind = "mamba2"
    module = "mamba2_attn"
    metadata_name = "Mamba2AttentionMetadata"
    replaces = (f"{_BACKENDS}.mamba2_attn", "Mamba2AttentionMetadataBuilder")

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        self.chunk_size: int = vllm_config.model_config.get_mamba_chunk_size()
        assert self.chunk_size is not None, (
            "chunk_size needs to be set in the model config for Mamba2 models")
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def composite_classes_of(self) -> dict:
        checkpoint = vllm_class(*_CHECKPOINT)
        return {"checkpoint_meta": checkpoint} if checkpoint is not None else {}

    def linmeta_config(self) -> dict:
        return dict(super().linmeta_config(), chunk_size=int(self.chunk_size),
                    **self.checkpoint_config(self.kv_cache_spec, None))


class Mamba1AttentionMetadataBuilder(_MambaBuilder):
    kind = "mamba1"
    module = "mamba1_attn"
    metadata_name = "Mamba1AttentionMetadata"
    replaces = (f"{_BACKENDS}.mamba1_attn", "Mamba1AttentionMetadataBuilder")


class ShortConvAttentionMetadataBuilder(_MambaBuilder):
    kind = "short_conv"
    module = "short_conv_attn"
    metadata_name = "ShortConvAttentionMetadata"
    replaces = (f"{_BACKENDS}.short_conv_attn", "ShortConvAttentionMetadataBuilder")


class PleShortConvAttentionMetadataBuilder(_MambaBuilder):
    """vLLM 0.34's PleShortConvAttentionMetadataBuilder (short_conv_attn.py, LFM2's PLE
    variant), built by linmeta: ShortConv's metadata without causal-conv1d metadata when no
    row drafts, else its own speculative split; prefill checkpoints where the layer declares
    them."""

    kind = "ple_short_conv"
    module = "short_conv_attn"
    metadata_name = "PleShortConvAttentionMetadata"
    replaces = (f"{_BACKENDS}.short_conv_attn", "PleShortConvAttentionMetadataBuilder")
    supports_update_block_table: bool = False
    needs_causal_conv1d_metadata: bool = False

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.num_spec = self.num_spec_tokens
        self.use_full_cuda_graph = self.compilation_config.cudagraph_mode.has_full_cudagraphs()
        self.decode_cudagraph_max_tokens: int = self._engine.builder.decode_cudagraph_max_tokens

    def composite_classes_of(self) -> dict:
        checkpoint = vllm_class(*_CHECKPOINT)
        return {"checkpoint": checkpoint} if checkpoint is not None else {}

    def linmeta_config(self) -> dict:
        return dict(super().linmeta_config(), **self.checkpoint_config(self.kv_cache_spec, None))


class LinearAttentionMetadataBuilder(V034Builder, Base):
    """vLLM 0.34's LinearAttentionMetadataBuilder (linear_attn.py), built by linmeta."""

    kind = "linear"
    replaces = (f"{_BACKENDS}.linear_attn", "LinearAttentionMetadataBuilder")
    _cudagraph_support = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    reorder_batch_threshold: int = 1

    def metadata_class(self):
        return vllm_class(f"{_BACKENDS}.linear_attn", "LinearAttentionMetadata") or local_class(
            "linear")

    def linmeta_config(self) -> dict:
        return dict(self.common_config(), profile="vllm-0.34")

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        # The native call itself (one Python frame less than Builder.build).
        return self._engine.build(common_attn_metadata, None, None, False)


class BailingLinearAttentionMetadataBuilder(LinearAttentionMetadataBuilder):
    """vLLM 0.34's BailingLinearAttentionMetadataBuilder (linear_attn.py), built by linmeta:
    linear attention with decode / prefill state indices, speculative decoding when build()
    is handed accepted counts, FULL-graph staging of decode-only steps."""

    kind = "bailing_linear"
    replaces = (f"{_BACKENDS}.linear_attn", "BailingLinearAttentionMetadataBuilder")
    supports_spec_decode_metadata = True
    supports_update_block_table: bool = False

    @classmethod
    def get_cudagraph_support(cls, vllm_config, kv_cache_spec):
        return AttentionCGSupport.UNIFORM_BATCH

    @classmethod
    def unsupported(cls, kv_cache_spec, vllm_config):
        return super().unsupported(kv_cache_spec, vllm_config) or _threshold_unsupported(
            vllm_config)

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        self.compilation_config = vllm_config.compilation_config
        self.num_spec_tokens: int = vllm_config.num_speculative_tokens
        self.use_spec_decode: bool = self.num_spec_tokens > 0
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.decode_cudagraph_max_bs: int = self._engine.builder.decode_cudagraph_max_bs
        self._init_reorder_batch_threshold(1, self.use_spec_decode)

    def metadata_class(self):
        return vllm_class(f"{_BACKENDS}.linear_attn", "BailingLinearAttentionMetadata") or (
            local_class("bailing_linear"))

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False, *,
              num_accepted_tokens=None, num_decode_draft_tokens_cpu=None):
        # vLLM's takes the draft counts and never reads them.
        return self._engine.build(common_attn_metadata, num_accepted_tokens, None, False)
