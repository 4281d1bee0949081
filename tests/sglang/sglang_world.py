"""SGLang 0.5.23's own linear-attention metadata backends, set up on CPU tensors.

Everything that runs per step is SGLang's code; the stand-ins are outside the backends
(docs/sglang.md, "The harness"):

* the one-rank parallel override and ``get_context().override_server_args(...)``, as
  SGLang's own test kit does (``sglang/test/kits/attention_unittest/attention_methods/``);
* a minimal model-runner object (``Runner``) with what the backends' constructors read;
* the real ``HybridReqToTokenPool`` on CPU, whose ``req_index_to_mamba_index_mapping`` the
  caller writes directly (the scheduler's allocation);
* ``ForwardBatch`` objects built by hand (sglang_steps.py);
* two CPU predicates: GDN's ``conv_block_table`` is built only when ``is_cuda()`` (pure host
  code; the GDN module's ``is_cuda`` is replaced so it is built), and ``pin_memory`` is
  answered False (no CUDA); ``Tensor.pin_memory()`` returns the tensor itself (KDA's
  prefill-graph tables pin their host staging buffer). The graph-replay state indices take SGLang's plain-torch
  reference path on CPU by itself (``_fused_state_indices_ok`` is False off CUDA).

Import this module first: it sets ``CUDA_VISIBLE_DEVICES=""`` and the parallel override
before any SGLang module is imported.

``LINMETA_SGLANG_DEVICE=cuda`` (set before the import): the GPU stays visible, the pool and
the runner are on ``cuda`` and ``device_batch`` moves a batch's device fields there, as
SGLang's server has them; none of the CPU predicates above is replaced (``is_cuda()`` is
SGLang's own answer, pinned memory is real). SGLang's CUDA-only imports then need
``sgl_kernel``: where it is not installed, put ``tests/sglang/stubs`` on ``PYTHONPATH``
(placeholders that raise when called; docs/sglang.md, "GPU figures").
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from types import SimpleNamespace

DEVICE = os.environ.get("LINMETA_SGLANG_DEVICE", "cpu")
if DEVICE not in ("cpu", "cuda"):
    raise SystemExit(f"LINMETA_SGLANG_DEVICE must be cpu or cuda, not {DEVICE!r}")
if DEVICE == "cpu":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.pop("SGLANG_USE_CPU_ENGINE", None)
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import torch  # noqa: E402

torch.set_num_threads(1)
if DEVICE == "cuda" and not torch.cuda.is_available():
    raise SystemExit("LINMETA_SGLANG_DEVICE=cuda, but torch sees no CUDA device")

from sglang.srt.runtime_context import get_context, get_parallel  # noqa: E402

# The one-rank topology, before the attention modules are imported (the test kit's order).
_PARALLEL = get_parallel().override(
    tp_size=1,
    tp_rank=0,
    attn_tp_size=1,
    attn_tp_rank=0,
    tp_group=SimpleNamespace(rank_in_group=0, world_size=1),
)
_PARALLEL.__enter__()

import sglang  # noqa: E402
from sglang.srt.configs.mamba_utils import (  # noqa: E402
    KimiLinearCacheParams,
    KimiLinearStateShape,
    Mamba2CacheParams,
    Mamba2StateDType,
    Mamba2StateShape,
)
from sglang.srt.layers.attention import hybrid_linear_attn_backend as hlab  # noqa: E402
from sglang.srt.layers.attention.linear import gdn_backend  # noqa: E402
from sglang.srt.layers.attention.linear import kda_backend  # noqa: E402
from sglang.srt.layers.attention.linear import lightning_backend  # noqa: E402
from sglang.srt.layers.attention.linear import short_conv_backend  # noqa: E402
from sglang.srt.layers.attention.linear.utils import (  # noqa: E402
    resolve_linear_attn_backends,
)
from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool  # noqa: E402
from sglang.srt.model_executor.cuda_graph_config import (  # noqa: E402
    Backend,
    CudaGraphConfig,
    PhaseConfig,
)

SGLANG_VERSION = "0.5.23"
if sglang.__version__ != SGLANG_VERSION:
    raise SystemExit(f"this harness knows SGLang {SGLANG_VERSION}, found {sglang.__version__}")

if DEVICE == "cpu":
    # GDN's conv_block_table is host code gated on is_cuda(); build it on CPU too.
    gdn_backend.is_cuda = lambda: True
    # No CUDA: pinned host memory is unavailable (SGLang asks through this predicate).
    hlab.is_pin_memory_available = lambda *a, **k: False
    gdn_backend.is_pin_memory_available = lambda *a, **k: False
    # KDA's prefill-graph tables stage through torch.from_numpy(host).pin_memory(), which
    # needs CUDA; the staging buffer's values are what matter.
    torch.Tensor.pin_memory = lambda self, *a, **k: self

BACKENDS = {
    "mamba2": hlab.Mamba2AttnBackend,
    "gdn": gdn_backend.GDNAttnBackend,
    "kda": kda_backend.KDAAttnBackend,
    "short_conv": short_conv_backend.ShortConvAttnBackend,
    "lightning": lightning_backend.LightningAttentionBackend,
}


@dataclass(frozen=True)
class Config:
    """One engine configuration: what the server args and the model say."""

    backend: str
    chunk_size: int = 16  # the model's mamba_chunk_size (hf_text_config)
    cache_chunk_size: int = 64  # server-level mamba_cache_chunk_size (tracking grid)
    pool_size: int = 320  # request rows and mamba slots
    topk: int = 0  # speculative_eagle_topk (0: no speculative decoding)
    draft_tokens: int = 0  # speculative_num_draft_tokens
    conv_kernel: int = 4
    max_context_len: int = 4096
    # The radix cache's extra mamba buffer (mamba_radix_cache_strategy "extra_buffer"): KDA's
    # prefill-graph buckets then carry track tables.
    extra_buffer: bool = False

    def as_json(self):
        extra = {"extra_buffer": True} if self.extra_buffer else {}
        return extra | {
            "backend": self.backend,
            "chunk_size": self.chunk_size,
            "cache_chunk_size": self.cache_chunk_size,
            "pool_size": self.pool_size,
            "topk": self.topk,
            "draft_tokens": self.draft_tokens,
            "conv_kernel": self.conv_kernel,
            "max_context_len": self.max_context_len,
        }


def _server_args(cfg: Config):
    extra = (
        {"disable_radix_cache": False, "mamba_radix_cache_strategy": "extra_buffer"}
        if cfg.extra_buffer else {}
    )
    return get_context().override_server_args(
        **extra,
        attention_backend="triton",
        chunked_prefill_size=-1,
        cuda_graph_config=CudaGraphConfig(
            decode=PhaseConfig(backend=Backend.DISABLED),
            prefill=PhaseConfig(backend=Backend.DISABLED),
        ),
        dllm_algorithm=None,
        dllm_algorithm_config=None,
        enable_deterministic_inference=False,
        enable_mis=False,
        enable_symm_mem=False,
        kv_cache_dtype="auto",
        linear_attn_backend="triton",
        linear_attn_decode_backend=None,
        linear_attn_prefill_backend=None,
        mamba_backend="triton",
        max_running_requests=None,
        revision=None,
        speculative_algorithm=None,
        speculative_eagle_topk=cfg.topk,
        speculative_num_draft_tokens=cfg.draft_tokens,
        speculative_num_steps=max(0, cfg.draft_tokens - 1),
        triton_attention_num_kv_splits=8,
        triton_attention_split_tile_size=None,
        _mamba_cache_chunk_size=cfg.cache_chunk_size,
    )


def _cache_params(cfg: Config):
    dtype = Mamba2StateDType(conv=torch.bfloat16, temporal=torch.float32)
    if cfg.backend == "kda":
        shape = KimiLinearStateShape.create(
            tp_world_size=1, num_heads=2, head_dim=16, conv_kernel_size=cfg.conv_kernel
        )
        return KimiLinearCacheParams(shape=shape, layers=[0], dtype=dtype)
    shape = Mamba2StateShape.create(
        tp_world_size=1,
        intermediate_size=32,
        n_groups=1,
        num_heads=2,
        head_dim=16,
        state_size=16,
        conv_kernel=cfg.conv_kernel,
    )
    return Mamba2CacheParams(shape=shape, layers=[0], dtype=dtype)


class _TextConfig:
    """The model's hf config as the backends read it."""

    def __init__(self, cfg: Config):
        self.mamba_chunk_size = cfg.chunk_size
        self.num_attention_heads = 4
        self.num_hidden_layers = 2
        self.architectures = ["LinmetaHarness"]


# ForwardBatch / EagleVerifyInput fields a server holds on the device (ForwardBatch.init_new).
_DEVICE_FIELDS = (
    "input_ids", "req_pool_indices", "seq_lens", "out_cache_loc", "extend_seq_lens",
    "extend_prefix_lens", "extend_start_loc", "mamba_track_mask", "mamba_track_indices",
    "mamba_track_seqlens",
)
_SPEC_DEVICE_FIELDS = (
    "draft_token", "custom_mask", "positions", "retrieve_index", "retrieve_next_token",
    "retrieve_next_sibling",
)


class World:
    """Server args installed, a pool, a model runner and a fresh backend of cfg.backend."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._override = _server_args(cfg)
        server_args = self._override.install()
        text = _TextConfig(cfg)
        self.pool = HybridReqToTokenPool(
            size=cfg.pool_size,
            mamba_size=cfg.pool_size,
            mamba_spec_state_size=cfg.pool_size,
            max_context_len=cfg.max_context_len,
            device=DEVICE,
            enable_memory_saver=False,
            cache_params=_cache_params(cfg),
            mamba_layer_ids=[0],
            enable_mamba_extra_buffer=False,
            speculative_num_draft_tokens=cfg.draft_tokens or None,
            enable_overlap_schedule=False,
        )
        self.runner = SimpleNamespace(
            device=DEVICE,
            server_args=server_args,
            is_draft_worker=False,
            req_to_token_pool=self.pool,
            token_to_kv_pool=None,
            model_config=SimpleNamespace(
                hf_config=text,
                hf_text_config=text,
                context_len=cfg.max_context_len,
                is_encoder_decoder=False,
            ),
            sliding_window_size=None,
            kv_cache_dtype=torch.bfloat16,
            kv_cache_dtype_str="auto",
            linear_attn_backends=resolve_linear_attn_backends(),
        )
        self.backend = BACKENDS[cfg.backend](self.runner)

    def device_batch(self, fb):
        """Moves fb's device fields (those SGLang's server keeps on the GPU) to DEVICE, in
        place; the host fields (``seq_lens_cpu``, the ``*_cpu`` lists) stay. Returns fb."""
        if DEVICE == "cpu":
            return fb
        for name in _DEVICE_FIELDS:
            t = getattr(fb, name, None)
            if isinstance(t, torch.Tensor):
                setattr(fb, name, t.to(DEVICE))
        spec = getattr(fb, "spec_info", None)
        for name in _SPEC_DEVICE_FIELDS if spec is not None else ():
            t = getattr(spec, name, None)
            if isinstance(t, torch.Tensor):
                setattr(spec, name, t.to(DEVICE))
        return fb

    def reinstall(self):
        """Publishes this world's server args again (after another world's were)."""
        self._override = _server_args(self.cfg)
        self._override.install()

    def close(self):
        self._override.restore()
