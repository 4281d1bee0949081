"""vLLM general plugin: with LINMETA_VLLM=1, vLLM's GDN, Kimi-K3 KDA, Mamba2, Mamba1,
ShortConv (and PLE ShortConv), linear-attention, Bailing linear-attention and Inkling short-conv
(CUDA build) backends build their metadata with linmeta (linmeta.vllm's drop-in builder classes).

Registered as the ``vllm.general_plugins`` entry point ``linmeta`` (pyproject.toml). vLLM
calls ``register()`` in every process it starts (engine core, workers); without
LINMETA_VLLM=1 it does nothing and imports nothing. Under a vLLM release linmeta has no rules
for (anything but 0.34.x) it leaves vLLM's builders in place and says so once per process,
unless LINMETA_VLLM_ANY_RELEASE=1 forces the swap. docs/vllm.md.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("linmeta.vllm")

_B = "vllm.v1.attention.backends"
#: (module, backend class, linmeta.vllm builder class) swapped when present.
BACKENDS = (
    (f"{_B}.gdn_attn", "GDNAttentionBackend", "GDNAttentionMetadataBuilder"),
    ("vllm.models.kimi_k3.nvidia.kda_metadata", "KimiK3KDAAttentionBackend",
     "KimiK3KDAMetadataBuilder"),
    (f"{_B}.mamba2_attn", "Mamba2AttentionBackend", "Mamba2AttentionMetadataBuilder"),
    (f"{_B}.mamba1_attn", "Mamba1AttentionBackend", "Mamba1AttentionMetadataBuilder"),
    (f"{_B}.short_conv_attn", "ShortConvAttentionBackend", "ShortConvAttentionMetadataBuilder"),
    (f"{_B}.linear_attn", "LinearAttentionBackend", "LinearAttentionMetadataBuilder"),
    (f"{_B}.linear_attn", "BailingLinearAttentionBackend",
     "BailingLinearAttentionMetadataBuilder"),
    (f"{_B}.short_conv_attn", "PleShortConvAttentionBackend",
     "PleShortConvAttentionMetadataBuilder"),
    ("vllm.models.inkling.nvidia.sconv_swa_attn", "InklingSconvBackend",
     "InklingSconvMetadataBuilder"),
)


#: The vLLM releases linmeta has the rules of (docs/vllm.md).
RELEASES = ("0.34.",)


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").strip().lower() in ("1", "true", "yes", "on")


def enabled() -> bool:
    return _flag("LINMETA_VLLM")


_said_unknown = False


def known_release(version: str | None) -> bool:
    """Whether linmeta has the rules of vLLM `version`; else (once per process) a warning that
    vLLM's builders stay, unless LINMETA_VLLM_ANY_RELEASE=1 forces linmeta's."""
    global _said_unknown
    if version is not None and version.startswith(RELEASES):
        return True
    forced = _flag("LINMETA_VLLM_ANY_RELEASE")
    if not _said_unknown:
        _said_unknown = True
        if forced:
            logger.warning("linmeta: vLLM %s is no release linmeta has rules for (%s); "
                           "LINMETA_VLLM_ANY_RELEASE=1 swaps its builders anyway", version,
                           ", ".join(r + "x" for r in RELEASES))
        else:
            logger.warning("linmeta: vLLM %s is no release linmeta has rules for (%s): vLLM's "
                           "own metadata builders stay (LINMETA_VLLM_ANY_RELEASE=1 forces "
                           "linmeta's)", version, ", ".join(r + "x" for r in RELEASES))
    return forced


def register() -> list[str]:
    """Swaps the backends' get_builder_cls() for linmeta's builders when LINMETA_VLLM=1 and
    vLLM is a release linmeta has the rules of (or LINMETA_VLLM_ANY_RELEASE=1). Returns the
    names of the backends swapped (empty when not)."""
    if not enabled():
        return []
    import importlib

    vllm = importlib.import_module("vllm")
    version = getattr(vllm, "__version__", None)
    if not known_release(version if isinstance(version, str) else None):
        return []

    from . import vllm as lv  # after vLLM is importable: subclasses vLLM's base builder

    swapped = []
    for module_name, backend_name, builder_name in BACKENDS:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue  # e.g. a vLLM without Kimi-K3
        backend = getattr(module, backend_name, None)
        if backend is None:
            continue
        builder = getattr(lv, builder_name)
        backend.get_builder_cls = staticmethod(lambda builder=builder: builder)
        swapped.append(backend_name)
    logger.info("linmeta: metadata builders of %s are linmeta's", ", ".join(swapped) or "nothing")
    return swapped
