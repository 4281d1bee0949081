"""Imports vLLM 0.34.0's GDN, Kimi-K3 KDA and Mamba-family metadata builders on a CPU-only
machine.

Import this module before anything else from vllm. It sets the two environment variables
the CPU platform needs and replaces the few CUDA-only pieces that sit on the builders' paths
with what a CUDA engine computes there. Every replacement is listed here, nothing else of
the wheel is touched:

* ``_resolve_gdn_prefill_backend``: on CPU it always answers "triton" (FlashInfer's GDN
  prefill needs SM90+). The harness answers the case's configured ``prefill_backend``, as
  the resolver does on a Hopper engine asked for that backend.
* ``kda_metadata.stage_spec_decode_metadata``: a Triton kernel (asserts CUDA). Replaced
  by the PyTorch staging written in the builder's own comment (state / qsl / accepted).
* ``KimiK3KDAMetadataBuilder._get_recoverssm_context``: builds a forward-pass object from
  the model's KDA layers (CUDA buffers). It is not metadata; the harness returns a marker.
* Inkling's ``sconv_seq_metadata`` launches a Triton kernel: the harness runs that kernel, the
  wheel's own code, in Triton's CPU interpreter (``TRITON_INTERPRET=1``, which has to be set
  before triton is first imported; no other builder on the harness's paths launches a kernel).
* KDA in align mode reads ``mamba_aligned_state_indices``, which the model runner
  precomputes on the GPU; ``aligned_state_indices`` below is the PyTorch gather written in
  the builder's comment, set on the builder before each build (see wheel_runner.py).
"""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

import vllm  # noqa: E402
import vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn as qwen_gdn  # noqa: E402
import vllm.models.inkling.nvidia.sconv_swa_attn as inkling_sconv  # noqa: E402
import vllm.models.kimi_k3.nvidia.kda_metadata as kda_metadata  # noqa: E402
import vllm.v1.attention.backends.gdn_attn as gdn_attn  # noqa: E402
import vllm.v1.attention.backends.linear_attn as linear_attn  # noqa: E402
import vllm.v1.attention.backends.mamba1_attn as mamba1_attn  # noqa: E402
import vllm.v1.attention.backends.mamba2_attn as mamba2_attn  # noqa: E402
import vllm.v1.attention.backends.short_conv_attn as short_conv_attn  # noqa: E402
from vllm.v1.attention.backends.utils import NULL_BLOCK_ID  # noqa: E402

EXPECTED_VERSION = "0.34.0"
if vllm.__version__ != EXPECTED_VERSION:
    raise RuntimeError(f"this harness targets vllm {EXPECTED_VERSION}, found {vllm.__version__}")

DEVICE = torch.device("cpu")

# The prefill backend the next builder construction resolves to (set by wheel_builders).
_requested_gdn_prefill_backend = ["triton"]


def set_gdn_prefill_backend(backend: str) -> None:
    _requested_gdn_prefill_backend[0] = backend


def _resolve_gdn_prefill_backend(vllm_config):
    del vllm_config
    backend = _requested_gdn_prefill_backend[0]
    return backend, backend


def _stage_spec_decode_metadata(
    state_indices,
    query_start_loc,
    num_accepted_tokens,
    staged_state_indices,
    staged_query_start_loc,
    staged_num_accepted_tokens,
    *,
    num_spec_decodes,
):
    # The builder's comment:
    #   state[:N].copy_(state_src); state[N:].fill_(NULL_BLOCK_ID)
    #   qsl[:N + 1].copy_(qsl_src); qsl[N + 1:].fill_(qsl_src[-1])
    #   accepted[:N].copy_(accepted_src); accepted[N:].fill_(1)
    n = num_spec_decodes
    if state_indices.shape[1] != staged_state_indices.shape[1]:
        # The kernel reads NUM_STATE_SLOTS columns of every source row: past the end of a
        # narrower row. linmeta rejects such a table (too narrow for the staged gather).
        raise ValueError(
            f"spec state staging reads {staged_state_indices.shape[1]} columns of a "
            f"{state_indices.shape[1]}-column gather (out of bounds on CUDA)"
        )
    staged_state_indices[:n].copy_(state_indices[:n])
    staged_state_indices[n:].fill_(NULL_BLOCK_ID)
    staged_query_start_loc[: n + 1].copy_(query_start_loc[: n + 1])
    staged_query_start_loc[n + 1 :].fill_(int(query_start_loc[n]))
    staged_num_accepted_tokens[:n].copy_(num_accepted_tokens[:n])
    staged_num_accepted_tokens[n:].fill_(1)


RECOVERSSM_CONTEXT_MARKER = object()

qwen_gdn._resolve_gdn_prefill_backend = _resolve_gdn_prefill_backend
kda_metadata.stage_spec_decode_metadata = _stage_spec_decode_metadata
kda_metadata.KimiK3KDAMetadataBuilder._get_recoverssm_context = (
    lambda self: RECOVERSSM_CONTEXT_MARKER
)


def aligned_state_indices(block_table, seq_lens, block_size, num_speculative_blocks):
    """The builder comment's PyTorch "align" path (the runner's GPU precompute)."""
    start = ((seq_lens - 1) // block_size).clamp_(min=0)
    offsets = torch.arange(1 + num_speculative_blocks, dtype=torch.int32)
    indices = (start[:, None] + offsets).to(torch.int64)
    return torch.gather(block_table, 1, indices)


GDNAttentionMetadataBuilder = gdn_attn.GDNAttentionMetadataBuilder
KimiK3KDAMetadataBuilder = kda_metadata.KimiK3KDAMetadataBuilder

# The Mamba family, unchanged (the PLE short-conv and Bailing linear variants are not covered).
Mamba2AttentionMetadataBuilder = mamba2_attn.Mamba2AttentionMetadataBuilder
Mamba1AttentionMetadataBuilder = mamba1_attn.Mamba1AttentionMetadataBuilder
ShortConvAttentionMetadataBuilder = short_conv_attn.ShortConvAttentionMetadataBuilder
LinearAttentionMetadataBuilder = linear_attn.LinearAttentionMetadataBuilder
BailingLinearAttentionMetadataBuilder = linear_attn.BailingLinearAttentionMetadataBuilder
PleShortConvAttentionMetadataBuilder = short_conv_attn.PleShortConvAttentionMetadataBuilder

# Inkling's short-conv builder (its Triton kernel interpreted, above).
InklingSconvMetadataBuilder = inkling_sconv.InklingSconvMetadataBuilder
