"""The differential of linmeta.sglang against SGLang 0.5.23's own backends (docs/sglang.md):
the same random steps (sglang_steps.py) through SGLang's class and through linmeta's
replacement, each in a world of its own (pool, model runner, backend, graph buffers filled
alike), and every field of every object compared: the metadata (as sglang-case JSON:
dtype, shape, values), which tensors alias which graph buffers, the side effects on the
batch. Run with the SGLang venv's python and linmeta importable (scripts/sglang-diff.sh).

    python linmeta_diff.py --backend mamba2 --count 18000 --seed 1
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import sglang_world as sw  # first: environment, parallel override, CPU predicates
import sglang_cases
import sglang_steps

import linmeta.sglang
from linmeta.sglang import gdn as lm_gdn
from linmeta.sglang import kda as lm_kda
from linmeta.sglang import lightning as lm_lightning
from linmeta.sglang import mamba2 as lm_mamba2
from linmeta.sglang import short_conv as lm_short_conv

LINMETA = {
    "mamba2": lm_mamba2.LinmetaMamba2AttnBackend,
    "gdn": lm_gdn.LinmetaGDNAttnBackend,
    "lightning": lm_lightning.LinmetaLightningAttentionBackend,
    "kda": lm_kda.LinmetaKDAAttnBackend,
    "short_conv": lm_short_conv.LinmetaShortConvAttnBackend,
}


def case_of(step: dict, backends: dict) -> dict:
    """The step's case (sglang_cases.run_step) with sw.BACKENDS as given."""
    saved = dict(sw.BACKENDS)
    sw.BACKENDS.update(backends)
    try:
        case = sglang_cases.run_step(step, fresh=False)
    finally:
        sw.BACKENDS.clear()
        sw.BACKENDS.update(saved)
    return case


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="mamba2", choices=sorted(LINMETA))
    ap.add_argument("--mode", action="append")
    ap.add_argument("--count", type=int, default=1800)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--show", type=int, default=5, help="differences printed")
    args = ap.parse_args(argv)
    modes = args.mode or list(sglang_steps.BACKEND_MODES[args.backend])
    if linmeta.sglang.SGLANG_VERSION != sw.SGLANG_VERSION:
        raise SystemExit("linmeta.sglang's version is not the harness's")
    # Two sets of worlds: SGLang's class and linmeta's, keyed apart.
    worlds_sglang, worlds_linmeta = {}, {}
    counts: dict = {}
    bad = 0
    t0 = time.time()
    for step in sglang_steps.generate(args.backend, modes, args.count, args.seed):
        sglang_cases._WORLDS.clear()
        sglang_cases._WORLDS.update(worlds_sglang)
        want = sglang_cases.run_step(step)
        worlds_sglang.update(sglang_cases._WORLDS)
        sglang_cases._WORLDS.clear()
        sglang_cases._WORLDS.update(worlds_linmeta)
        got = case_of(step, {args.backend: LINMETA[args.backend]})
        worlds_linmeta.update(sglang_cases._WORLDS)
        got["class"] = want["class"]
        key = step["mode"]
        same = sglang_cases.dumps(got) == sglang_cases.dumps(want)
        counts[key] = counts.get(key, [0, 0])
        counts[key][0] += 1
        if not same:
            counts[key][1] += 1
            bad += 1
            if bad <= args.show:
                print(f"differs: {want['name']}", file=sys.stderr)
                w, g = json.loads(sglang_cases.dumps(want)), json.loads(sglang_cases.dumps(got))
                for part in ("raises", "output"):
                    if w.get(part) != g.get(part):
                        wo, go = w.get(part), g.get(part)
                        if isinstance(wo, dict) and isinstance(go, dict):
                            for k in sorted(set(wo) | set(go)):
                                if wo.get(k) != go.get(k):
                                    print(f"  {part}.{k}:\n    sglang  {json.dumps(wo.get(k))[:400]}\n"
                                          f"    linmeta {json.dumps(go.get(k))[:400]}", file=sys.stderr)
                        else:
                            print(f"  {part}: sglang {str(wo)[:300]} / linmeta {str(go)[:300]}",
                                  file=sys.stderr)
    took = time.time() - t0
    sglang_cases._WORLDS.clear()
    # linmeta's class built every step (no fallback to SGLang's code inside it).
    served = [w for w in worlds_linmeta.values()
              if isinstance(w.backend, LINMETA[args.backend])
              and getattr(w.backend, "_linmeta", None) is not None]
    if len(served) != len(worlds_linmeta) or not served:
        print(f"linmeta served {len(served)} of {len(worlds_linmeta)} worlds", file=sys.stderr)
        bad += 1
    sglang_cases.close_all(worlds_sglang, worlds_linmeta)
    summary = ", ".join(f"{m} {n} ({d} differ)" for m, (n, d) in sorted(counts.items()))
    print(f"linmeta_diff {args.backend}: {sum(n for n, _ in counts.values())} steps in "
          f"{took:.1f} s: {summary}; {bad} differ")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
