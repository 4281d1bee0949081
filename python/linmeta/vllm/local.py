"""The metadata dataclasses where vLLM is not importable: made from linmeta's output table
(one field per top-level row of the builder kind, vLLM's names, all defaulting to None).
Composites then stay dicts of their members."""

from __future__ import annotations

import dataclasses
import functools
import typing

from .. import _linmeta

_NAMES = {
    "gdn": "GDNAttentionMetadata",
    "kda": "KimiK3KDAMetadata",
    "mamba2": "Mamba2AttentionMetadata",
    "mamba1": "Mamba1AttentionMetadata",
    "short_conv": "ShortConvAttentionMetadata",
    "linear": "LinearAttentionMetadata",
    "bailing_linear": "BailingLinearAttentionMetadata",
    "ple_short_conv": "PleShortConvAttentionMetadata",
    "inkling": "InklingSconvMetadata",
}


@functools.cache
def local_class(kind: str):
    """The dataclass of builder kind `kind` (vLLM's class name, linmeta.vllm's module)."""
    fields = [(name, typing.Any, dataclasses.field(default=None))
              for name, _dtype, _scope, kinds in _linmeta.OUTPUT_FIELDS
              if kind in kinds and "." not in name]
    # make_dataclass(module=) is Python 3.12+.
    cls = dataclasses.make_dataclass(_NAMES[kind], fields)
    cls.__module__ = __name__
    return cls
