"""Checks, against the real SGLang 0.5.23 wheel, the extension point linmeta.sglang will use
(docs/sglang.md, "Switching it on"): a class REPLACE hook of SGLang's plugin hook registry on
``Mamba2AttnBackend``.

A subclass registered with ``HookRegistry.register(target, cls, HookType.REPLACE)`` and
applied by ``HookRegistry.apply_hooks()`` (what ``sglang.srt.plugins.load_plugins`` runs
after the ``sglang.srt.plugins`` entry points) must be:

1. what the defining module and every module that imported the name now hold (the
   function-level import in ``attention_registry.attn_backend_wrapper`` reads it at call time);
2. seen by SGLang's own ``isinstance(self, Mamba2AttnBackend)`` checks (Mamba2's tracking
   rule in ``_init_track_ssm_indices``): the probe, which only counts calls, gives the
   identical case on tracked extend steps.

    python plugin_probe.py      # exit 0 when every check holds
"""

from __future__ import annotations

import json
import random
import sys

import sglang_world as sw  # first: environment and stand-ins
import sglang_cases
import sglang_steps
from sglang.srt.layers.attention import attention_registry
from sglang.srt.layers.attention import hybrid_linear_attn_backend as hlab
from sglang.srt.plugins.hook_registry import HookRegistry, HookType

TARGET = "sglang.srt.layers.attention.hybrid_linear_attn_backend.Mamba2AttnBackend"


def _imported():
    from sglang.srt.layers.attention.hybrid_linear_attn_backend import Mamba2AttnBackend

    return Mamba2AttnBackend


def _wrapper_source() -> str:
    import inspect

    return inspect.getsource(attention_registry.attn_backend_wrapper)


def main() -> int:
    original = hlab.Mamba2AttnBackend
    rng = random.Random(5)
    steps = []
    while len(steps) < 40:
        step = sglang_steps.make_step("mamba2", "extend", rng)
        if "track" in step:
            step["seed"], step["index"] = 5, len(steps)
            steps.append(step)
    before = [sglang_cases.dumps(sglang_cases.run_step(s, fresh=True)) for s in steps]

    calls = []

    class Probe(original):
        def init_forward_metadata(self, forward_batch):
            calls.append(forward_batch.batch_size)
            super().init_forward_metadata(forward_batch)

    HookRegistry.register(TARGET, Probe, HookType.REPLACE)
    HookRegistry.apply_hooks()
    sw.BACKENDS["mamba2"] = hlab.Mamba2AttnBackend
    checks = {
        "module attribute replaced": hlab.Mamba2AttnBackend is Probe,
        "a function-level import (attn_backend_wrapper's) gets it": _imported() is Probe,
        "attn_backend_wrapper still imports it that way": "import (" in _wrapper_source()
        and "Mamba2AttnBackend," in _wrapper_source(),
    }
    after = [sglang_cases.run_step(s, fresh=True) for s in steps]
    checks["the probe class ran"] = len(calls) == len(steps) and all(
        a["class"] == "Probe" for a in after
    )
    same = 0
    for b, a in zip(before, after):
        a["class"] = json.loads(b)["class"]
        same += sglang_cases.dumps(a) == b
    checks[f"identical cases on tracked extends ({same}/{len(steps)})"] = same == len(steps)
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
