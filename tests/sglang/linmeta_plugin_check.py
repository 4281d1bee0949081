"""Checks linmeta.sglang's switch on the real SGLang 0.5.23 wheel (docs/sglang.md, "Switching
it on"): pyproject.toml declares ``linmeta.sglang:register`` in the ``sglang.srt.plugins``
group; under another SGLang version register() changes nothing and logs once; under 0.5.23
it registers the REPLACE hook SGLang's ``load_plugins`` applies, after which the module
attribute and a function-level import (attn_backend_wrapper's) are linmeta's class, which
builds eagerly, in a graph replay, and SGLang's own ``isinstance`` checks pass.

    python linmeta_plugin_check.py      # exit 0 when every check holds
"""

from __future__ import annotations

import logging
import os
import sys
import tomllib

import sglang_world as sw  # first: environment and stand-ins
import sglang
import sglang_cases
import sglang_steps
from sglang.srt.layers.attention import hybrid_linear_attn_backend as hlab
from sglang.srt.plugins.hook_registry import HookRegistry

import linmeta
import linmeta.sglang
from linmeta.sglang.gdn import LinmetaGDNAttnBackend
from linmeta.sglang.mamba2 import LinmetaMamba2AttnBackend

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))


def main() -> int:
    checks = {}
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        eps = tomllib.load(f)["project"]["entry-points"]
    checks["pyproject.toml: sglang.srt.plugins linmeta = linmeta.sglang:register"] = (
        eps.get("sglang.srt.plugins", {}).get("linmeta") == "linmeta.sglang:register")

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.disable(logging.NOTSET)
    linmeta.sglang.logger.addHandler(handler)
    real = sglang.__version__
    sglang.__version__ = "0.5.22"
    try:
        first, second = linmeta.sglang.register(), linmeta.sglang.register()
    finally:
        sglang.__version__ = real
    checks["another version: nothing registered, one log line"] = (
        first == [] and second == [] and len(records) == 1
        and hlab.Mamba2AttnBackend is not LinmetaMamba2AttnBackend)

    done = linmeta.sglang.register()
    HookRegistry.apply_hooks()  # what sglang.srt.plugins.load_plugins runs after the plugins
    from sglang.srt.layers.attention.hybrid_linear_attn_backend import Mamba2AttnBackend

    checks["0.5.23: the Mamba2, GDN, Lightning, KDA and ShortConv backends registered"] = done == [
        "sglang.srt.layers.attention.hybrid_linear_attn_backend.Mamba2AttnBackend",
        "sglang.srt.layers.attention.linear.gdn_backend.GDNAttnBackend",
        "sglang.srt.layers.attention.linear.lightning_backend.LightningAttentionBackend",
        "sglang.srt.layers.attention.linear.kda_backend.KDAAttnBackend",
        "sglang.srt.layers.attention.linear.short_conv_backend.ShortConvAttnBackend"]
    from sglang.srt.layers.attention.linear import gdn_backend
    from sglang.srt.layers.attention.linear.gdn_backend import GDNAttnBackend

    checks["module attribute and a function-level import are linmeta's class"] = (
        hlab.Mamba2AttnBackend is LinmetaMamba2AttnBackend
        and Mamba2AttnBackend is LinmetaMamba2AttnBackend
        and gdn_backend.GDNAttnBackend is LinmetaGDNAttnBackend
        and GDNAttnBackend is LinmetaGDNAttnBackend)

    sw.BACKENDS["mamba2"] = hlab.Mamba2AttnBackend
    rng = __import__("random").Random(3)
    for mode in ("mixed", "replay"):
        step = sglang_steps.make_step("mamba2", mode, rng)
        step["seed"], step["index"] = 3, 0
        case = sglang_cases.run_step(step, fresh=True)
        world = sglang_cases._ACTIVE[0]
        checks[f"{mode}: linmeta's class built it"] = (
            case["class"] == "LinmetaMamba2AttnBackend" and "output" in case
            and getattr(world.backend, "_linmeta", None) is not None
            and isinstance(world.backend, hlab.Mamba2AttnBackend))
    # Hardening: a ForwardBatch attribute that calls back into the same backend is refused.
    eng = world.backend._linmeta
    fb = sglang_cases.forward_batch(step, world)
    inner = []

    class Reentrant:
        def __getattr__(self, name):
            if name == "batch_size" and not inner:
                try:
                    eng.build(fb, 0, None)
                    inner.append("built")
                except linmeta.Error as e:
                    inner.append(str(e))
            return getattr(fb, name)

    eng.build(Reentrant(), 0, None)
    checks["re-entry refused"] = (
        len(inner) == 1 and "entered while another call of the same builder" in inner[0])
    a, b = eng.build(fb, 0, None), eng.build(fb, 0, None)
    checks["fresh view objects per result"] = (
        a["query_start_loc"] is not b["query_start_loc"]
        and a["query_start_loc"].data_ptr() == b["query_start_loc"].data_ptr())
    del world, eng, fb, a, b
    sglang_cases.close_all()
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
