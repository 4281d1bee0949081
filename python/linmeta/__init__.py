"""linmeta: per-step metadata of linear-attention and SSM layers (vLLM's GDN, Kimi-K3 KDA,
Mamba2, Mamba1, ShortConv (and PLE), linear-attention and Bailing builders), built natively.

Builders plan a scheduler step on the host and finish every output array in the builder's
persistent buffers (host memory, or CUDA memory with one kernel launch). Inputs are read
without copies from torch tensors, DLPack, ``__cuda_array_interface__``,
``__array_interface__`` or buffer-protocol arrays. Outputs are views of the builder's
buffers::

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
    BUILDER_KINDS,
    CONV_BLOCK,
    FLA_CHUNK_SIZE,
    NULL_BLOCK_ID,
    OUTPUT_FIELDS,
    PAD_SLOT_ID,
    SGLANG_KINDS,
    Error,
    Metadata,
    MetadataBuilder,
    cuda_available,
)

from ._version import __version__  # generated from CMakeLists.txt's project version


def _kind_class(kind: str, name: str):
    def __init__(self, **kwargs):
        MetadataBuilder.__init__(self, kind, **kwargs)

    engine = "SGLang's backend" if kind in SGLANG_KINDS else "vLLM's builder"
    doc = f"MetadataBuilder('{kind}', **kwargs): {engine} {name.replace('MetadataBuilder', '')}."
    return type(name, (MetadataBuilder,), {"__init__": __init__, "__doc__": doc})


def _kind_class_name(kind: str) -> str:
    """The C++ alias of a kind: gdn -> GdnMetadataBuilder, ple_short_conv ->
    PleShortConvMetadataBuilder (LINMETA_BUILDER_KINDS, config.hpp)."""
    return "".join(part.capitalize() for part in kind.split("_")) + "MetadataBuilder"


#: One class per builder kind of the core's table: GdnMetadataBuilder, KdaMetadataBuilder,
#: Mamba2MetadataBuilder, Mamba1MetadataBuilder, ShortConvMetadataBuilder,
#: LinearMetadataBuilder, BailingLinearMetadataBuilder, PleShortConvMetadataBuilder,
#: InklingMetadataBuilder, ...
_KIND_CLASSES = {_kind_class_name(k): _kind_class(k, _kind_class_name(k)) for k in BUILDER_KINDS}
globals().update(_KIND_CLASSES)


def fields_of(kind: str) -> tuple[str, ...]:
    """The metadata fields builder kind `kind` fills (vLLM's names, dotted inside composites),
    from the output table."""
    return tuple(name for name, _dtype, _scope, kinds in OUTPUT_FIELDS if kind in kinds)


def step_kwargs(common_attn_metadata, num_accepted_tokens=None, num_decode_draft_tokens_cpu=None):
    """The keyword arguments of ``build()`` for a vLLM ``CommonAttentionMetadata``: the arrays
    passed through untouched (int32, as vLLM 0.34 has them). Add ``stream=`` as needed."""
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
    "BUILDER_KINDS",
    "SGLANG_KINDS",
    "CONV_BLOCK",
    "Error",
    "FLA_CHUNK_SIZE",
    "Metadata",
    "MetadataBuilder",
    "NULL_BLOCK_ID",
    "OUTPUT_FIELDS",
    "PAD_SLOT_ID",
    "cuda_available",
    "fields_of",
    "step_kwargs",
] + sorted(_KIND_CLASSES)
