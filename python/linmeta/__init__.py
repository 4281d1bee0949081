"""linmeta: per-step GatedDeltaNet (GDN) and Kimi Delta Attention (KDA) metadata.

Builders plan a scheduler step on the host and finish every output array in the
builder's persistent buffers (host memory, or CUDA memory with one upload and one
kernel launch). Inputs are read without copies from any DLPack,
``__cuda_array_interface__``, ``__array_interface__`` or buffer-protocol array
(torch tensors, numpy arrays, ...). Outputs are DLPack-exportable views of the
builder's buffers::

    import torch, linmeta
    b = linmeta.GdnMetadataBuilder(num_spec=3, max_num_seqs=256, target="cuda",
                                   array_type="torch")
    md = b.build(query_start_loc=qsl, query_start_loc_cpu=qsl_cpu, seq_lens=seq_lens,
                 seq_lens_cpu_upper_bound=seq_lens_cpu, block_table=block_table,
                 num_actual_tokens=n, stream=torch.cuda.current_stream().cuda_stream)
    md.spec_state_indices_tensor   # torch.Tensor aliasing the builder's buffer

See docs/python.md.
"""

from ._linmeta import (
    CONV_BLOCK,
    FLA_CHUNK_SIZE,
    NULL_BLOCK_ID,
    OUTPUT_FIELDS,
    PAD_SLOT_ID,
    Checkpoint,
    Error,
    GdnMetadataBuilder,
    KdaMetadataBuilder,
    Metadata,
    MetadataBuilder,
    RecoverSsmAlign,
    RecoverSsmCommit,
    cuda_available,
)

__version__ = "0.1.0"

#: Names of the array-valued Metadata fields (vLLM's names), from the output table.
ARRAY_FIELDS = tuple(name for name, _dtype, _scope in OUTPUT_FIELDS)

#: Names of the integer Metadata fields.
COUNT_FIELDS = (
    "num_prefills",
    "num_prefill_tokens",
    "num_decodes",
    "num_decode_tokens",
    "num_spec_decodes",
    "num_spec_decode_tokens",
    "num_actual_tokens",
)


def step_kwargs(common_attn_metadata, num_accepted_tokens=None, num_decode_draft_tokens_cpu=None):
    """The keyword arguments of ``build()`` for a vLLM ``CommonAttentionMetadata``.

    ``builder.build(**linmeta.step_kwargs(m, num_accepted_tokens, num_decode_draft_tokens_cpu))``
    is the linmeta counterpart of vLLM's
    ``GDNAttentionMetadataBuilder.build(common_prefix_len, m, num_accepted_tokens,
    num_decode_draft_tokens_cpu)``. Arrays are passed through untouched: they must already be
    int32 (vLLM keeps ``num_accepted_tokens`` as int64 in some versions: pass
    ``num_accepted_tokens.to(torch.int32)``). Add ``stream=`` as needed.
    """
    m = common_attn_metadata
    seq_lens_cpu = getattr(m, "seq_lens_cpu_upper_bound", None)
    if seq_lens_cpu is None:
        seq_lens_cpu = getattr(m, "seq_lens_cpu", None)
    return dict(
        query_start_loc=m.query_start_loc,
        query_start_loc_cpu=m.query_start_loc_cpu,
        seq_lens=m.seq_lens,
        seq_lens_cpu_upper_bound=seq_lens_cpu,
        is_prefilling=getattr(m, "is_prefilling", None),
        block_table=m.block_table_tensor,
        num_actual_tokens=int(m.num_actual_tokens),
        num_reqs=int(m.num_reqs),
        num_decode_draft_tokens_cpu=num_decode_draft_tokens_cpu,
        num_accepted_tokens=num_accepted_tokens,
    )


__all__ = [
    "ARRAY_FIELDS",
    "CONV_BLOCK",
    "COUNT_FIELDS",
    "Checkpoint",
    "Error",
    "FLA_CHUNK_SIZE",
    "GdnMetadataBuilder",
    "KdaMetadataBuilder",
    "Metadata",
    "MetadataBuilder",
    "NULL_BLOCK_ID",
    "OUTPUT_FIELDS",
    "PAD_SLOT_ID",
    "RecoverSsmAlign",
    "RecoverSsmCommit",
    "cuda_available",
    "step_kwargs",
]
