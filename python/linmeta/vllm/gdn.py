"""vLLM's GatedDeltaNet and Kimi-K3 KDA metadata builders, built by linmeta."""

from __future__ import annotations

import torch

from ._common import AttentionCGSupport, Base, Builder, profile, vllm_class
from .local import local_class

_GDN = "vllm.v1.attention.backends.gdn_attn"
_KDA = "vllm.models.kimi_k3.nvidia.kda_metadata"
_CHECKPOINT = ("vllm.model_executor.layers.mamba.checkpoint", "MambaPrefillCheckpointMetadata")
_KDA_CHECKPOINT_ALIGN = 16  # FlashKDA's chunk: kKdaCheckpointAlign (include/linmeta/config.hpp)


def _gdn_prefill_backend(vllm_config) -> str:
    """vLLM's GDN prefill backend; "triton" where vLLM's resolver is not importable."""
    try:
        from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import (
            _resolve_gdn_prefill_backend as resolve,
        )
    except Exception:  # noqa: BLE001
        return "triton"
    return resolve(vllm_config)[1]


class GDNAttentionMetadataBuilder(Builder, Base):
    """vLLM's GDNAttentionMetadataBuilder (gdn_attn.py), built by linmeta."""

    kind = "gdn"
    replaces = (_GDN, "GDNAttentionMetadataBuilder")
    _cudagraph_support = AttentionCGSupport.UNIFORM_BATCH
    reorder_batch_threshold: int = 1

    @classmethod
    def unsupported(cls, kv_cache_spec, vllm_config):
        backend = _gdn_prefill_backend(vllm_config)
        if cls.kind == "gdn" and backend not in ("triton", "flashinfer"):
            return f"the {backend} prefill backend's chunk metadata"
        return None

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.compilation_config = vllm_config.compilation_config
        self.speculative_config = vllm_config.speculative_config
        self.gdn_prefill_backend = _gdn_prefill_backend(vllm_config)
        spec = self.speculative_config
        self.num_spec: int = int(spec.num_speculative_tokens) if spec else 0
        self.use_spec_decode: bool = self.num_spec > 0
        self._init_reorder_batch_threshold(1, self.use_spec_decode)
        self.use_full_cuda_graph: bool = self.compilation_config.cudagraph_mode.has_full_cudagraphs()
        # vLLM 0.34's MRV2 sets the aligned state indices of builders that declare them
        # (hasattr); linmeta gathers the same values from the block table itself. GDN's own
        # class only, as vLLM's (not isinstance: KDA's RecoverSSM / checkpoint metadata is
        # per group, every KDA group builds).
        self.supports_update_block_table = (
            type(self) is GDNAttentionMetadataBuilder and torch.device(device).type == "cuda"
            and (profile() == "vllm-0.34"
                 or bool(getattr(vllm_config, "use_v2_model_runner", False))))
        if self.supports_update_block_table:
            self.mamba_aligned_state_indices: torch.Tensor | None = None
        self._join_engine(device)
        self.decode_cudagraph_max_bs: int = self._engine.builder.decode_cudagraph_max_bs

    def metadata_class(self):
        return vllm_class(self.replaces[0], "GDNAttentionMetadata") or local_class("gdn")

    def composite_classes_of(self) -> dict:
        classes = {}
        if profile() == "vllm-0.34":
            checkpoint = vllm_class(*_CHECKPOINT)
            plan = vllm_class(_GDN, "GDNFlashInferCheckpointPlan")
            if checkpoint is not None and plan is not None:
                classes = {"checkpoint": checkpoint, "flashinfer_checkpoint_plan": plan}
        return classes

    def linmeta_config(self) -> dict:
        cfg = self.common_config()
        if profile() != "vllm-0.34":
            return dict(cfg, profile="seed",
                        chunk_metadata=self.gdn_prefill_backend in ("triton", "flashinfer"))
        # R4 / R5: chunk metadata and the checkpoint plan follow the prefill backend.
        return dict(cfg, profile="vllm-0.34", prefill_backend=self.gdn_prefill_backend,
                    **self.checkpoint_config(self.kv_cache_spec, int(self.kv_cache_spec.block_size)))

    # vLLM's GDN / KDA build() takes the counts positionally too. int64 counts (vLLM versions
    # that keep them so) are read from int32 copies the native engine makes on every call;
    # where a field is the caller's counts it is the caller's tensor, as vLLM returns it.
    def build(self, common_prefix_len, common_attn_metadata, num_accepted_tokens=None,
              num_decode_draft_tokens_cpu=None, fast_build=False):
        return self._engine.build(common_attn_metadata, num_accepted_tokens,
                                  num_decode_draft_tokens_cpu, False)


class KimiK3KDAMetadataBuilder(GDNAttentionMetadataBuilder):
    """The Kimi-K3 KDA builder (RecoverSSM, prefill checkpoints), built by linmeta."""

    kind = "kda"
    replaces = (_KDA, "KimiK3KDAMetadataBuilder")

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        self.use_recoverssm = bool(vllm_config.cache_config.use_kda_recoverssm)
        self.recoverssm_context = None
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.spec_state_slots = 1 if self.use_recoverssm else self.num_spec + 1
        if profile() == "vllm-0.34":
            # vLLM 0.34's KDA builder declares it; its MRV2 runner sets it (see GDN).
            self.mamba_aligned_state_indices = None
        # vLLM 0.34's build() asserts the runner set them in align mode.
        self._needs_aligned_indices = (profile() == "vllm-0.34"
                                       and vllm_config.cache_config.mamba_cache_mode == "align")

    def metadata_class(self):
        return vllm_class(_KDA, "KimiK3KDAMetadata") or local_class("kda")

    def composite_classes_of(self) -> dict:
        commit = vllm_class(_KDA, "KDARecoverSSMCommitMetadata")
        align = vllm_class(_KDA, "KDARecoverSSMAlignMetadata")
        checkpoint = vllm_class(*_CHECKPOINT) if profile() == "vllm-0.34" else None
        checkpoint = checkpoint or vllm_class(_KDA, "KDACheckpointMetadata")
        if commit is None or align is None or checkpoint is None:
            return {}
        return {"recoverssm_commit": commit, "recoverssm_commit.align": align,
                "checkpoint": checkpoint}

    def linmeta_config(self) -> dict:
        cfg = self.common_config()
        cfg.update(use_recoverssm=self.use_recoverssm)
        if profile() != "vllm-0.34":
            blocks = int(getattr(self.kv_cache_spec, "num_prefill_checkpoint_blocks", 0) or 0)
            return dict(cfg, profile="seed", num_prefill_checkpoint_blocks=blocks)
        extra = self.vllm_config.additional_config
        backend = extra.get("kda_prefill_backend") if isinstance(extra, dict) else None
        cfg.update(profile="vllm-0.34",
                   **self.checkpoint_config(self.kv_cache_spec, _KDA_CHECKPOINT_ALIGN))
        if backend in ("triton", "flashinfer", "flashkda"):
            cfg["prefill_backend"] = backend
        return cfg

    def build(self, common_prefix_len, common_attn_metadata, num_accepted_tokens=None,
              num_decode_draft_tokens_cpu=None, fast_build=False):
        if self._needs_aligned_indices:
            assert self.mamba_aligned_state_indices is not None, (
                "Aligned Mamba state indices must be precomputed")
        # GDN's build() by name, not super(): one lookup less per call.
        return self._with_context(GDNAttentionMetadataBuilder.build(
            self, common_prefix_len, common_attn_metadata, num_accepted_tokens,
            num_decode_draft_tokens_cpu))

    def build_for_cudagraph_capture(self, common_attn_metadata):
        return self._with_context(super().build_for_cudagraph_capture(common_attn_metadata))

    def update_block_table(self, metadata, blk_table, slot_mapping):
        return self._with_context(super().update_block_table(metadata, blk_table, slot_mapping))

    def _with_context(self, md):
        """`md` with vLLM's RecoverSSM commit context where it has a commit."""
        if md.recoverssm_commit is not None:
            md.recoverssm_context = self._get_recoverssm_context()
        return md

    def _get_recoverssm_context(self):
        """As vLLM's builder: the RecoverSSM commit context over this group's layers (needs
        vLLM's Kimi-K3 ops; None without them)."""
        if self.recoverssm_context is None:
            context_cls = vllm_class("vllm.models.kimi_k3.nvidia.ops.recoverssm",
                                     "KDARecoverSSMCommitContext")
            if context_cls is None:
                return None
            forward_context = self.vllm_config.compilation_config.static_forward_context
            self.recoverssm_context = context_cls.create(
                [forward_context[name] for name in self.layer_names],
                spec_query_len=1 + self.vllm_config.num_speculative_tokens,
                max_num_reqs=self.vllm_config.scheduler_config.max_num_seqs)
        return self.recoverssm_context
