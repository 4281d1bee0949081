"""linmeta's SGLang ShortConvAttnBackend (LFM2, ZAYA1): SGLang 0.5.23's class with its metadata
entry points built by linmeta's ``sglang_short_conv`` kind (docs/sglang.md, "ShortConv"). The
per-step state ``conv_state_metadata()`` hands out (SGLang's own method, not overridden) is the
kind's: ``_cache_indices`` (written into ``_cache_indices_buf`` when the batch fits),
``_has_initial_state`` and ``_has_prefix_cpu``; ``_slot_ids_cpu``, the slots as a host list, is
one device->host copy of ``_cache_indices`` on an eager extend, as SGLang's
(``needs_extend_host_mirrors``; a subclass that sets it False has none)."""

from __future__ import annotations

import torch
from sglang.srt.layers.attention.linear.short_conv_backend import ShortConvAttnBackend
from sglang.srt.layers.attention.mamba.mamba2_metadata import ForwardMetadata

from ._common import Backend


class LinmetaShortConvAttnBackend(Backend, ShortConvAttnBackend):
    KIND = "sglang_short_conv"
    METADATA = ForwardMetadata

    def _linmeta_host_mirrors(self) -> bool:
        return bool(self.needs_extend_host_mirrors)

    def _linmeta_cache_indices_buf(self):
        return self._cache_indices_buf

    def _linmeta_supported(self) -> bool:
        # The kind's cache_indices are int64 (SGLang's canonical dtype); a subclass that
        # narrows them stays SGLang's.
        return self.cache_indices_dtype == torch.int64 and super()._linmeta_supported()

    def _linmeta_after(self, fb, entry: int, fields: dict) -> None:
        self._reset_step_state()
        self._cache_indices = fields["cache_indices"]
        self._has_initial_state = fields["has_initial_state"]
        prefix = fields["has_prefix_cpu"]
        if prefix is not None:
            # SGLang's own device->host copy: the slots as a host list for an extend host
            # loop (docs/sglang.md, "Costs").
            self._slot_ids_cpu = self._cache_indices.tolist()
            self._has_prefix_cpu = prefix
