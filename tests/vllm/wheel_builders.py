"""Case config -> vLLM 0.34.0 config objects and builder instances (CPU).

Case config keys: those of ../../tests/data/public.jsonl (see docs/semantics.md, "Case
files") plus, for ``profile: "vllm-0.34"``, the optional ``prefill_backend``:
GDN "triton" (default) | "flashinfer"; KDA "flashkda" (default) | "triton" | "flashinfer".

What an engine resolves and the harness sets the same way:
* the CPU platform resets the cudagraph mode to NONE and may change the capture size:
  both are restored to the case's values after VllmConfig is built;
* speculative decoding is ``SpeculativeConfig(method="ngram")`` with k tokens (a drafter
  with no model; it does not drop EAGLE blocks, so no hash look-ahead);
* a single-group engine resolves ``hash_block_size`` and ``cache_hit_alignment_tokens``
  to the scheduler block size, which is the Mamba block size in align mode;
* the layer's prefill checkpoint alignment: KDA 16 under FlashKDA (vLLM sets
  ``num_prefill_checkpoint_blocks = 1`` exactly then); GDN the prefix-cache grid (the
  Mamba block size) under FlashInfer in align mode.

The Mamba family (``MAMBA_BUILDERS``: Mamba2, Mamba1, ShortConv and its PLE variant, linear
attention and its Bailing subclass) takes the
same keys minus ``prefill_backend``, plus ``chunk_size`` (mamba2: what
``model_config.get_mamba_chunk_size()`` answers, read once in the builder's __init__) and
``prefill_checkpoint_alignment`` (the MambaSpec field as the layer declares it; absent or null
= vLLM's default None, under which no checkpoint is ever valid; the real Mamba2 layer declares
blocks 1 and alignment 1). The model config is a ``ModelConfig`` carrying only the HF text
config that ``get_mamba_chunk_size`` reads (no model is loaded; the builders read nothing else
of it with ReplaySSM off). The MambaSpec's ``mamba_type`` is the builder's backend.

ReplaySSM's Triton path (``use_replayssm``: the base-Mamba builders, k = 0): the cache config's
``use_replayssm`` and ``replayssm_buffer_len``, and a MambaSpec of ReplaySSM's five state
shapes (conv, ssm, x_cache, dt_cache, B_cache; mamba_utils.py append_replayssm_ring), of which the
builder reads B_cache's ngroups (``shapes[4][0]``). Case files do not record the two sizes (the
core has no use for them): they are ``REPLAYSSM_SHAPE`` unless the caller passes others
(adapter_diff.py varies them).

Inkling's short-conv builder (``inkling``, models/inkling/nvidia/sconv_swa_attn.py) takes a
SlidingWindowSpec of ``block_size``-token blocks (the conv kernel size; its build reads no field
of it) and reads only ``scheduler_config.max_num_batched_tokens`` (the size of its per-token
buffers): the case's ``max_num_batched_tokens``, a key only Inkling's cases carry. The other
keys are the Mamba family's; its cache mode is none (no Mamba state).
"""

from __future__ import annotations

import wheel_env
from transformers import PretrainedConfig
from vllm.config import (
    CacheConfig,
    CompilationConfig,
    CUDAGraphMode,
    ModelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
from vllm.v1.kv_cache_interface import MambaSpec, SlidingWindowSpec

PROFILE = "vllm-0.34"
KDA_FLASHKDA_CHECKPOINT_ALIGNMENT = 16
# FlashKDA is what "auto" resolves to for Kimi-K3 on SM90/SM10x/SM12x.
DEFAULT_BACKEND = {"gdn": "triton", "kda": "flashkda"}
BACKENDS = {"gdn": ("triton", "flashinfer"), "kda": ("triton", "flashinfer", "flashkda")}
# The Mamba family: builder name -> (class name in wheel_env, MambaSpec.mamba_type).
MAMBA_BUILDERS = {
    "mamba2": ("Mamba2AttentionMetadataBuilder", MambaAttentionBackendEnum.MAMBA2),
    "mamba1": ("Mamba1AttentionMetadataBuilder", MambaAttentionBackendEnum.MAMBA1),
    "short_conv": ("ShortConvAttentionMetadataBuilder", MambaAttentionBackendEnum.SHORT_CONV),
    "linear": ("LinearAttentionMetadataBuilder", MambaAttentionBackendEnum.LINEAR),
    "bailing_linear": ("BailingLinearAttentionMetadataBuilder", MambaAttentionBackendEnum.LINEAR),
    "ple_short_conv": ("PleShortConvAttentionMetadataBuilder", MambaAttentionBackendEnum.SHORT_CONV),
}


INKLING = "inkling"
# The Mamba base builders (BaseMambaAttentionMetadataBuilder), which take ReplaySSM.
REPLAYSSM_BUILDERS = ("mamba2", "mamba1", "short_conv", "ple_short_conv")
# (B_cache ngroups, replayssm_buffer_len) of the case files' ReplaySSM configurations.
REPLAYSSM_SHAPE = (2, 16)


def is_mamba(builder: str) -> bool:
    return builder in MAMBA_BUILDERS


def runs_like_mamba(builder: str) -> bool:
    """Run by wheel_mamba.py: the Mamba family and Inkling (the same case keys)."""
    return is_mamba(builder) or builder == INKLING


class UnsupportedConfig(ValueError):
    """A case config no vLLM 0.34 engine can have."""


def prefill_backend(builder: str, config: dict) -> str:
    backend = config.get("prefill_backend") or DEFAULT_BACKEND[builder]
    if backend not in BACKENDS[builder]:
        raise UnsupportedConfig(f"{builder}: prefill_backend {backend!r} not in {BACKENDS[builder]}")
    return backend


def checkpoint_alignment(builder: str, config: dict) -> int | None:
    """The MambaSpec's prefill_checkpoint_alignment; None when the layer exports none."""
    blocks = int(config["num_prefill_checkpoint_blocks"])
    if is_mamba(builder):
        alignment = config.get("prefill_checkpoint_alignment")
        return None if alignment is None else int(alignment)
    backend = prefill_backend(builder, config)
    if builder == "kda":
        exports = backend == "flashkda"
        alignment = KDA_FLASHKDA_CHECKPOINT_ALIGNMENT
    elif config.get("prefill_checkpoint_alignment") is not None:
        # A layer's own grid (GLM-5-Next's FlashKDA-exported GDN: 16, any prefill backend).
        exports = config["mamba_cache_mode"] == "align"
        alignment = int(config["prefill_checkpoint_alignment"])
    else:
        exports = backend == "flashinfer" and config["mamba_cache_mode"] == "align"
        alignment = int(config["block_size"])
    if blocks and not exports:
        raise UnsupportedConfig(
            f"{builder}: num_prefill_checkpoint_blocks = {blocks} needs a prefill backend that "
            "exports checkpoints (kda: flashkda; gdn: flashinfer in align mode)"
        )
    return alignment if blocks else None


def check_config(builder: str, config: dict) -> None:
    if config.get("profile") != PROFILE:
        raise UnsupportedConfig(f"config.profile must be {PROFILE!r}")
    if config["mamba_cache_mode"] not in ("none", "align"):
        raise UnsupportedConfig(f"mamba_cache_mode {config['mamba_cache_mode']!r} (0.34: none|align)")
    if builder == INKLING and config["mamba_cache_mode"] != "none":
        raise UnsupportedConfig("inkling has no Mamba state: mamba_cache_mode none")
    if config.get("use_replayssm"):
        if builder not in REPLAYSSM_BUILDERS:
            raise UnsupportedConfig(f"use_replayssm is an option of {REPLAYSSM_BUILDERS}")
        if int(config["num_spec"]) > 0:
            raise UnsupportedConfig("use_replayssm: vLLM 0.34's Triton ReplaySSM has k = 0")
    if runs_like_mamba(builder):
        if config["use_recoverssm"]:
            raise UnsupportedConfig("use_recoverssm is a KDA option")
        if config.get("prefill_backend") not in (None, "triton"):
            raise UnsupportedConfig(f"{builder}: prefill_backend is a GDN/KDA option")
        if builder == "mamba2" and not int(config.get("chunk_size") or 0) > 0:
            raise UnsupportedConfig("mamba2 needs config.chunk_size (model_config.get_mamba_chunk_size())")
        alignment = config.get("prefill_checkpoint_alignment")
        if alignment is not None and int(alignment) <= 0:
            raise UnsupportedConfig("prefill_checkpoint_alignment must be positive or null")
        return
    if builder == "gdn" and config["use_recoverssm"]:
        raise UnsupportedConfig("use_recoverssm is a KDA option")
    checkpoint_alignment(builder, config)


def make_model_config(config: dict) -> ModelConfig:
    """A ModelConfig holding only the HF text config that get_mamba_chunk_size() reads
    (``chunk_size``, as Mamba2 / NemotronH / Zamba configs name it); the method is vLLM's own."""
    model_config = object.__new__(ModelConfig)
    chunk = config.get("chunk_size")
    hf = {} if chunk is None else {"chunk_size": int(chunk)}
    model_config.hf_text_config = PretrainedConfig(**hf)
    return model_config


def make_vllm_config(builder: str, config: dict, replayssm_shape=REPLAYSSM_SHAPE) -> VllmConfig:
    num_spec = int(config["num_spec"])
    mode = CUDAGraphMode.FULL_AND_PIECEWISE if config["full_cuda_graph"] else CUDAGraphMode.PIECEWISE
    capture = config["max_cudagraph_capture_size"]
    additional = {}
    if not runs_like_mamba(builder):
        backend = prefill_backend(builder, config)
        additional = {"kda_prefill_backend": backend} if builder == "kda" else {}
        if builder == "gdn":
            additional["gdn_prefill_backend"] = backend
    replayssm = bool(config.get("use_replayssm"))
    cache = CacheConfig(
        mamba_cache_mode=config["mamba_cache_mode"],
        mamba_block_size=int(config["block_size"]),
        use_replayssm=replayssm,
        **({"replayssm_buffer_len": int(replayssm_shape[1])} if replayssm else {}),
    )
    vc = VllmConfig(
        compilation_config=CompilationConfig(cudagraph_mode=mode, max_cudagraph_capture_size=capture),
        speculative_config=(
            SpeculativeConfig(method="ngram", num_speculative_tokens=num_spec) if num_spec > 0 else None
        ),
        scheduler_config=SchedulerConfig(
            max_num_seqs=int(config["max_num_seqs"]),
            max_model_len=1 << 20,
            is_encoder_decoder=False,
        ),
        cache_config=cache,
        additional_config=additional,
    )
    # The CPU platform turns graphs off; the builders must see the engine's settings.
    vc.compilation_config.cudagraph_mode = mode
    vc.compilation_config.max_cudagraph_capture_size = capture
    # init=False fields, set as the engine sets them after construction.
    vc.cache_config.use_kda_recoverssm = bool(config["use_recoverssm"])
    block = int(config["block_size"])
    vc.cache_config.hash_block_size = block
    vc.cache_config.cache_hit_alignment_tokens = block
    if builder == INKLING:
        vc.scheduler_config.max_num_batched_tokens = int(config["max_num_batched_tokens"])
    if is_mamba(builder):
        vc.model_config = make_model_config(config)
        if builder == "mamba2" and vc.model_config.get_mamba_chunk_size() != int(config["chunk_size"]):
            raise RuntimeError("get_mamba_chunk_size() did not answer the configured chunk_size")
    return vc


def replayssm_shapes(ngroups: int, buffer_len: int) -> tuple:
    """A Mamba2 layer's ReplaySSM page (mamba_utils.py append_replayssm_ring, Triton): conv,
    ssm (4 heads of 8 x 16), x_cache, dt_cache, B_cache."""
    heads, head_dim, state = 4, 8, 16
    return ((3, 32), (heads, head_dim, state), (heads, buffer_len, head_dim), (heads, buffer_len),
            (ngroups, buffer_len, state))


def make_kv_cache_spec(builder: str, config: dict, replayssm_shape=REPLAYSSM_SHAPE) -> MambaSpec:
    f32, bf16 = wheel_env.torch.float32, wheel_env.torch.bfloat16
    replayssm = bool(config.get("use_replayssm"))
    return MambaSpec(
        block_size=int(config["block_size"]),
        shapes=replayssm_shapes(*replayssm_shape) if replayssm else ((1,),),
        dtypes=(bf16, f32, bf16, f32, bf16) if replayssm else (f32,),
        mamba_cache_mode=config["mamba_cache_mode"],
        num_speculative_blocks=int(config["num_speculative_blocks"]),
        num_prefill_checkpoint_blocks=int(config["num_prefill_checkpoint_blocks"]),
        prefill_checkpoint_alignment=checkpoint_alignment(builder, config),
        **({"mamba_type": MAMBA_BUILDERS[builder][1]} if is_mamba(builder) else {}),
    )


def make_inkling_spec(config: dict) -> SlidingWindowSpec:
    """Inkling's conv cache: a SlidingWindowSpec of kernel-size blocks (its build reads none of
    it)."""
    block = int(config["block_size"])
    return SlidingWindowSpec(block_size=block, num_kv_heads=1, head_size=64,
                             dtype=wheel_env.torch.bfloat16, sliding_window=block)


def make_builder(builder: str, config: dict, group: int = 0):
    """One builder instance, as the runner makes one per KV-cache group."""
    check_config(builder, config)
    if builder == INKLING:
        spec = make_inkling_spec(config)
        return wheel_env.InklingSconvMetadataBuilder(
            spec, [f"model.layers.{group}.sconv"], make_vllm_config(builder, config), wheel_env.DEVICE)
    if is_mamba(builder):
        cls = getattr(wheel_env, MAMBA_BUILDERS[builder][0])
        layer_names = [f"model.layers.{group}.mixer"]
        spec, vc = make_kv_cache_spec(builder, config), make_vllm_config(builder, config)
        return cls(spec, layer_names, vc, wheel_env.DEVICE)
    cls = {
        "gdn": wheel_env.GDNAttentionMetadataBuilder,
        "kda": wheel_env.KimiK3KDAMetadataBuilder,
    }[builder]
    wheel_env.set_gdn_prefill_backend(prefill_backend(builder, config) if builder == "gdn" else "triton")
    layer_names = [f"model.layers.{group}.linear_attn"]
    b = cls(make_kv_cache_spec(builder, config), layer_names, make_vllm_config(builder, config), wheel_env.DEVICE)
    if builder == "gdn" and b.gdn_prefill_backend != prefill_backend(builder, config):
        raise RuntimeError("the GDN prefill backend did not resolve as configured")
    return b
