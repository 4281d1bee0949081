"""linmeta.sglang: SGLang 0.5.23's linear-attention metadata built by linmeta (docs/sglang.md).

SGLang loads general plugins from the ``sglang.srt.plugins`` entry-point group in every process
that builds a model; linmeta's entry point is :func:`register` (pyproject.toml). With SGLang
0.5.23 it replaces ``Mamba2AttnBackend``, ``GDNAttnBackend``, ``LightningAttentionBackend``,
``KDAAttnBackend`` and ``ShortConvAttnBackend`` (SGLang's hook registry, ``HookType.REPLACE``)
by linmeta's subclasses (:mod:`linmeta.sglang.mamba2`, :mod:`~linmeta.sglang.gdn`,
:mod:`~linmeta.sglang.lightning`, :mod:`~linmeta.sglang.kda`,
:mod:`~linmeta.sglang.short_conv`), whose metadata entry points build each step with one plan
and one launch of linmeta's ``sglang_mamba2`` / ``sglang_gdn`` / ``sglang_lightning`` /
``sglang_kda`` / ``sglang_short_conv`` kind. Under another
SGLang version it leaves SGLang's classes alone and says so once. ``LINMETA_SGLANG=0`` turns
it off; ``SGLANG_PLUGINS=linmeta`` (SGLang's own variable) restricts SGLang to this plugin.
"""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("linmeta.sglang")

#: The SGLang version whose rules linmeta has (docs/sglang.md).
SGLANG_VERSION = "0.5.23"

_HLAB = "sglang.srt.layers.attention.hybrid_linear_attn_backend"
_LIN = "sglang.srt.layers.attention.linear"
#: (SGLang class path, linmeta module, linmeta class) replaced by register().
BACKENDS = (
    (f"{_HLAB}.Mamba2AttnBackend", "mamba2", "LinmetaMamba2AttnBackend"),
    (f"{_LIN}.gdn_backend.GDNAttnBackend", "gdn", "LinmetaGDNAttnBackend"),
    (f"{_LIN}.lightning_backend.LightningAttentionBackend", "lightning",
     "LinmetaLightningAttentionBackend"),
    (f"{_LIN}.kda_backend.KDAAttnBackend", "kda", "LinmetaKDAAttnBackend"),
    (f"{_LIN}.short_conv_backend.ShortConvAttnBackend", "short_conv",
     "LinmetaShortConvAttnBackend"),
)

_said = False


def _say_once(message: str) -> None:
    global _said
    if not _said:
        _said = True
        logger.warning(message)


def enabled() -> bool:
    return os.environ.get("LINMETA_SGLANG", "1").strip().lower() not in ("0", "false", "no", "off")


def register() -> list[str]:
    """The ``sglang.srt.plugins`` entry point: registers the REPLACE hooks of the backends
    linmeta serves when the installed SGLang is 0.5.23 (else nothing, with one log line).
    Returns the class paths registered."""
    if not enabled():
        return []
    try:
        import sglang
    except ImportError:
        return []
    version = getattr(sglang, "__version__", None)
    if version != SGLANG_VERSION:
        _say_once(
            f"linmeta.sglang: SGLang {version} is not {SGLANG_VERSION}, the version linmeta "
            "has the rules of: SGLang's own linear-attention metadata stays in place"
        )
        return []
    import importlib

    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    done = []
    for target, module, name in BACKENDS:
        cls = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        HookRegistry.register(target, cls, HookType.REPLACE)
        done.append(target)
    return done
