"""Differential testing of linmeta.vllm against the seed builders, run live.

The seed builders run through the seed oracle (ORACLE_DIR: $LINMETA_ORACLE_DIR, by default
../shared/oracle beside the repository; the tests that need it skip with ORACLE_MISSING when
it is not there): a stand-in ``vllm`` package plus a loader. Loading them puts that stand-in first on sys.path; linmeta.vllm is
then (re)imported over it, so that it subclasses the stand-in's AttentionMetadataBuilder and
returns the seed modules' own dataclasses, as it would return vLLM's in an engine.

Also here: the random-test seed (fixed, LINMETA_TEST_SEED overrides it), a seeded random step
generator with the distribution of tools/common/random_step.hpp, an object-to-object
comparison (values, dtypes, shapes, devices, None-ness, dataclass types, dict structure) and
helpers that switch linmeta.vllm's rules profile or import it afresh.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import random
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
ORACLE_DIR = os.environ.get(
    "LINMETA_ORACLE_DIR", os.path.normpath(os.path.join(REPO, "..", "shared", "oracle"))
)
ORACLE_MISSING = (f"the seed oracle is not at {ORACLE_DIR} (LINMETA_ORACLE_DIR names another "
                  "place): these tests compare against the seed builders it runs")
PUBLIC_CASES = os.path.join(REPO, "tests", "data", "public.jsonl")
SEED_ERRORS = os.path.join(REPO, "tests", "data", "seed_errors.jsonl")

#: The random tests' seed unless LINMETA_TEST_SEED is set (tests print it on failure).
DEFAULT_TEST_SEED = 20261204

_SEEDS = None


def test_seed(default: int = DEFAULT_TEST_SEED) -> int:
    """The seed of the random tests: LINMETA_TEST_SEED, else `default` (never a random one)."""
    return int(os.environ.get("LINMETA_TEST_SEED", default))


def oracle_available() -> bool:
    return os.path.isfile(os.path.join(ORACLE_DIR, "seedload.py"))


def _vllm_modules() -> dict:
    return {k: v for k, v in sys.modules.items() if k == "linmeta.vllm"
            or k.startswith("linmeta.vllm.")}


def reimport_linmeta_vllm(monkeypatch=None):
    """linmeta.vllm imported afresh (its package and submodules executed again over whatever
    `vllm` is importable now). With `monkeypatch`, the modules it replaces are put back when
    the test ends; without, the fresh ones stay."""
    import linmeta

    for name in _vllm_modules():
        if monkeypatch is not None:
            monkeypatch.delitem(sys.modules, name)
        else:
            del sys.modules[name]
    if monkeypatch is not None and hasattr(linmeta, "vllm"):
        monkeypatch.setattr(linmeta, "vllm", linmeta.vllm)
    return importlib.import_module("linmeta.vllm")


def load():
    """(seeds, runner, linmeta.vllm), loading the seeds first (once). A linmeta.vllm imported
    before the stand-in vllm (by another test module) is imported again over it."""
    global _SEEDS
    if ORACLE_DIR not in sys.path:
        sys.path.insert(0, ORACLE_DIR)
    import runner  # noqa: E402  (the oracle's)
    import seedload  # noqa: E402

    if _SEEDS is None:
        _SEEDS = seedload.load_seeds()
        # seedload's stand-in for seed 000's aligned-gather Triton kernel builds its offsets
        # on the CPU; this one follows the tensors' device (same semantics), so that the KDA
        # seed also runs with CUDA tensors.
        _SEEDS.kda._mamba_get_block_table_tensor = _aligned_state_indices
    import linmeta.vllm as lv

    if lv._common.Base is not sys.modules["vllm.v1.attention.backend"].AttentionMetadataBuilder:
        lv = reimport_linmeta_vllm()
    return _SEEDS, runner, lv


def set_profile(monkeypatch, lv, profile):
    """Runs the rest of the test under rules profile `profile` (None: the seed rules), as
    linmeta.vllm.set_profile() sets it (the one place every class asks)."""
    monkeypatch.setattr(lv._common, "_profile", profile)


def _aligned_state_indices(block_table, seq_lens, kv_cache_spec, mamba_cache_mode):
    if mamba_cache_mode in ("all", "none"):
        return block_table
    start = ((seq_lens - 1) // kv_cache_spec.block_size).clamp_(min=0)
    offsets = torch.arange(
        1 + kv_cache_spec.num_speculative_blocks, dtype=torch.int32, device=seq_lens.device
    )
    return torch.gather(block_table, 1, (start[:, None] + offsets).to(torch.int64))


def load_cases(path=PUBLIC_CASES):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


# ------------------------------------------------------------------------------- comparison


def _tensor_diff(ours, ref, path):
    if not isinstance(ours, torch.Tensor):
        return f"{path}: expected a tensor, got {type(ours).__name__}"
    if ours.dtype != ref.dtype:
        return f"{path}: dtype {ours.dtype} != reference {ref.dtype}"
    if tuple(ours.shape) != tuple(ref.shape):
        return f"{path}: shape {tuple(ours.shape)} != reference {tuple(ref.shape)}"
    if ours.device != ref.device:
        return f"{path}: device {ours.device} != reference {ref.device}"
    if not torch.equal(ours.cpu(), ref.cpu()):
        return f"{path}: values {ours.cpu().tolist()} != reference {ref.cpu().tolist()}"
    return None


def diff(ours, ref, path="md", skip=()):
    """Every difference between two metadata objects (a list of strings)."""
    out = []
    if ref is None or ours is None:
        if ref is not ours:
            out.append(f"{path}: {ours!r:.80} vs reference {ref!r:.80}")
        return out
    if isinstance(ref, torch.Tensor):
        d = _tensor_diff(ours, ref, path)
        return [d] if d else []
    if isinstance(ref, (bool, int, float, str)):
        if type(ours) is not type(ref) or ours != ref:
            out.append(f"{path}: {ours!r} ({type(ours).__name__}) vs reference {ref!r}")
        return out
    if isinstance(ref, (list, tuple)):
        if type(ours) is not type(ref) or len(ours) != len(ref):
            out.append(f"{path}: {ours!r:.80} vs reference {ref!r:.80}")
            return out
        for i, (a, b) in enumerate(zip(ours, ref)):
            out += diff(a, b, f"{path}[{i}]", skip)
        return out
    if isinstance(ref, dict):
        if not isinstance(ours, dict) or list(ours.keys()) != list(ref.keys()):
            keys = list(ours.keys()) if isinstance(ours, dict) else type(ours).__name__
            out.append(f"{path}: keys {keys} vs reference {list(ref.keys())}")
            return out
        for k in ref:
            out += diff(ours[k], ref[k], f"{path}[{k!r}]", skip)
        return out
    if dataclasses.is_dataclass(ref):
        if type(ours) is not type(ref):
            out.append(f"{path}: type {type(ours)} vs reference {type(ref)}")
            return out
        for f in dataclasses.fields(ref):
            if f.name in skip:
                continue
            out += diff(getattr(ours, f.name), getattr(ref, f.name), f"{path}.{f.name}", skip)
        return out
    # Forward-pass objects (the RecoverSSM commit context): same type and same attributes.
    if type(ours) is not type(ref):
        out.append(f"{path}: type {type(ours)} vs reference {type(ref)}")
        return out
    if hasattr(ref, "__dict__"):
        for k, v in vars(ref).items():
            w = getattr(ours, k, "<missing>")
            if isinstance(v, list) and isinstance(w, list):
                if len(v) != len(w) or any(a is not b for a, b in zip(v, w)):
                    out.append(f"{path}.{k}: differs")
            elif w != v:
                out.append(f"{path}.{k}: {w!r} vs reference {v!r}")
    return out


def diff_native(ours, native, path="md"):
    """Differences between linmeta.vllm's metadata object and a linmeta.Metadata built
    directly (composites there are dicts: compared member by member)."""
    out = []
    for f in dataclasses.fields(ours):
        if not hasattr(native, f.name):
            continue  # not linmeta's (recoverssm_context)
        mine, theirs = getattr(ours, f.name), getattr(native, f.name)
        if dataclasses.is_dataclass(mine):
            mine = _members(mine)
        out += diff(mine, theirs, f"{path}.{f.name}")
    return out


def _members(obj):
    return {k: _members(v) if dataclasses.is_dataclass(v) else v for k, v in vars(obj).items()}


# --------------------------------------------------------------------------------- running


def vllm_objects(runner, config, groups, max_num_batched_tokens=None):
    """One (kv_cache_spec, layer_names, vllm_config) per group, shared by seed and adapter."""
    out = []
    for g in range(groups):
        names = [f"model.layers.{g}.linear_attn"]
        vc = runner.make_vllm_config(config, names)
        if max_num_batched_tokens is not None:
            vc.scheduler_config.max_num_batched_tokens = max_num_batched_tokens
        out.append((runner.make_kv_cache_spec(config), names, vc))
    return out


def _i32(values, device="cpu"):
    return torch.tensor(values, dtype=torch.int32, device=device)


def common_metadata(runner, step, table, device="cpu"):
    m = runner.make_common_metadata(step, table)
    if device == "cpu":
        return m
    # Device copies of the device-side fields; host ones stay on the CPU.
    return m.replace(
        query_start_loc=m.query_start_loc.to(device),
        seq_lens=m.seq_lens.to(device),
        block_table_tensor=m.block_table_tensor.to(device),
        slot_mapping=m.slot_mapping.to(device),
    )


def step_counts(step, device="cpu", dtype=torch.int32):
    """The step's (num_accepted_tokens on `device`, num_decode_draft_tokens_cpu), tensors of
    `dtype` (vLLM 0.34: int32; versions before it kept int64) or None, as vLLM's runner
    passes them to build()."""
    accepted, drafts = step["num_accepted_tokens"], step["num_decode_draft_tokens_cpu"]
    return (
        None if accepted is None else torch.tensor(accepted, dtype=dtype, device=device),
        None if drafts is None else torch.tensor(drafts, dtype=dtype),
    )


def classes(seeds, lv, kind):
    """(the seed's builder class, linmeta.vllm's) of builder kind `kind`."""
    return {
        "gdn": (seeds.gdn.GDNAttentionMetadataBuilder, lv.GDNAttentionMetadataBuilder),
        "kda": (seeds.kda.KimiK3KDAMetadataBuilder, lv.KimiK3KDAMetadataBuilder),
    }[kind]


def call(b, mode, m, accepted, drafts):
    """One build as vLLM's runner calls it."""
    if mode == "capture":
        return b.build_for_cudagraph_capture(m)
    return b.build(0, m, num_accepted_tokens=accepted, num_decode_draft_tokens_cpu=drafts)


def group_metadata(runner, case, device="cpu", counts_dtype=torch.int32):
    """One CommonAttentionMetadata per group of `case` (the same step tensors, each group's
    table), and the step's counts."""
    step = case["step"]
    tables = step.get("groups") or [step["block_table"]]
    base = common_metadata(runner, step, tables[0], device)
    ms = [base] + [base.replace(block_table_tensor=_i32(t, device)) for t in tables[1:]]
    return ms, step_counts(step, device, counts_dtype)


def run_case(seeds, runner, lv, case, device="cpu", max_num_batched_tokens=None,
             counts_dtype=torch.int32):
    """Runs a case through the seed builders and through linmeta.vllm, each called the way
    vLLM's runner calls them (one builder per KV-cache group, every builder made before the
    first build, the same step tensors; accepted / draft counts of `counts_dtype`). Returns
    (ours, reference, reference_error, (our builders, the seed's, the per-group
    CommonAttentionMetadata)); reference_error is the exception the seed raised (then
    reference is None)."""
    kind, mode = case["builder"], case["mode"]
    ms, (accepted, drafts) = group_metadata(runner, case, device, counts_dtype)
    objs = vllm_objects(runner, case["config"], len(ms), max_num_batched_tokens)
    dev = torch.device(device)
    ref_cls, our_cls = classes(seeds, lv, kind)

    runner.clear_step_cache(seeds)
    ref, ref_error = [], None
    refs = [ref_cls(spec, names, vc, dev) for spec, names, vc in objs]
    try:
        for b, m in zip(refs, ms):
            ref.append(call(b, mode, m, accepted, drafts))
    except Exception as e:  # noqa: BLE001 - a seed bug on a valid step
        ref, ref_error = None, e
    runner.clear_step_cache(seeds)
    ours_b = [our_cls(spec, names, vc, dev) for spec, names, vc in objs]
    ours = [call(b, mode, m, accepted, drafts) for b, m in zip(ours_b, ms)]
    return ours, ref, ref_error, (ours_b, refs, ms)


def independent_reference(seeds, runner, case, group, device="cpu"):
    """Group `group` built alone by a fresh seed builder (no per-step cache)."""
    step, config, kind, mode = case["step"], case["config"], case["builder"], case["mode"]
    tables = step.get("groups") or [step["block_table"]]
    (spec, names, vc) = vllm_objects(runner, config, group + 1)[group]
    m = common_metadata(runner, step, tables[group], device)
    accepted, drafts = step_counts(step, device)
    runner.clear_step_cache(seeds)
    b = {"gdn": seeds.gdn.GDNAttentionMetadataBuilder,
         "kda": seeds.kda.KimiK3KDAMetadataBuilder}[kind](spec, names, vc, torch.device(device))
    md = call(b, mode, m, accepted, drafts)
    runner.clear_step_cache(seeds)
    return md


def native_build(builder, m, accepted, drafts, table, capture=False):
    """The step of `m` with table `table` built by a new native MetadataBuilder of one group
    with the configuration of linmeta.vllm builder object `builder`."""
    import linmeta

    own = builder._engine.builder
    target = own.target
    nb = linmeta.MetadataBuilder(own.kind, target=target, array_type="torch", **own.config)
    kw = linmeta.step_kwargs(m, accepted, drafts)
    kw["block_table"] = table
    if target == "cuda":
        kw["stream"] = torch.cuda.current_stream()
    return (nb.build_for_cudagraph_capture if capture else nb.build)(**kw)


def update_block_table_steps(seeds, runner, lv, rng, steps, device="cpu", profile=None):
    """MRV2's path on `steps` random GDN build steps with several KV-cache groups (the
    generator's other steps are skipped): group 0 builds, each later group calls
    update_block_table on its metadata, from its own table or (30 %) a copy of it in other
    memory. Yields (case, group, result, the same group built alone by a native builder, the
    seed's update_block_table or None). The seed is compared in the seed profile outside
    align mode (its align mode re-gathers from MRV2's precomputed indices); vllm-0.34's align
    mode gets mamba_aligned_state_indices set, as MRV2 sets them."""
    taken = 0
    while taken < steps:
        case = random_case(rng, "gdn", profile=profile)
        tables = case["step"].get("groups")
        if not tables or case["mode"] != "build":
            continue
        taken += 1
        align = case["config"]["mamba_cache_mode"] == "align"
        tokens = case["config"]["max_num_batched_tokens"]
        ours, ref, err, (ob, rb, ms) = run_case(seeds, runner, lv, case, device, tokens)
        accepted, drafts = step_counts(case["step"], device)
        for g in range(1, len(tables)):
            if align:
                ob[g].mamba_aligned_state_indices = ms[g].block_table_tensor[:, 0]
            t = ms[g].block_table_tensor
            if rng.random() < 0.3:
                t = t.clone()
            got = ob[g].update_block_table(ours[0], t, ms[g].slot_mapping)
            alone = native_build(ob[g], ms[g], accepted, drafts, t)
            seed = None
            if profile is None and err is None and not align:
                seed = rb[g].update_block_table(ref[0], t, ms[g].slot_mapping)
            yield case, g, got, alone, seed


# ------------------------------------------------------------------------- random steps


def random_config(rng: random.Random, kind: str, profile: str | None = None) -> dict:
    """A case config with tools/common/random_step.hpp's random_config distribution
    (profile "vllm-0.34": its make_vllm034 on top)."""
    num_spec = rng.choice([0, 1, 2, 3, 7])
    max_num_seqs = rng.choice([4, 16, 64, 256])
    cap = rng.randint(1, 512) if rng.random() < 0.3 else None
    use_recoverssm = kind == "kda" and num_spec > 0 and rng.random() < 0.5
    c = {
        "num_spec": num_spec,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": rng.choice([2048, 8192]),
        "full_cuda_graph": rng.random() < 0.6,
        "max_cudagraph_capture_size": cap,
        "mamba_cache_mode": rng.choice(["none", "all", "align"]),
        "block_size": rng.choice([16, 64, 256]),
        "num_speculative_blocks": 0 if use_recoverssm else num_spec,
        "use_recoverssm": use_recoverssm,
        "num_prefill_checkpoint_blocks": (1 if rng.random() < 0.5 else 0) if kind == "kda" else 0,
    }
    if profile == "vllm-0.34":
        _make_vllm034(rng, kind, c)
    return c


def _make_vllm034(rng: random.Random, kind: str, c: dict) -> None:
    """random_step.hpp's make_vllm034: no "all" cache mode, a prefill backend, checkpoints
    only where that backend exports them (KDA: FlashKDA; GDN: FlashInfer in align mode,
    64-aligned blocks)."""
    c["profile"] = "vllm-0.34"
    if c["mamba_cache_mode"] == "all":
        c["mamba_cache_mode"] = "align"
    if kind == "gdn":
        c["prefill_backend"] = "flashinfer" if rng.random() < 0.5 else "triton"
        exports = (
            c["prefill_backend"] == "flashinfer"
            and c["mamba_cache_mode"] == "align"
            and c["block_size"] % 64 == 0
        )
        c["num_prefill_checkpoint_blocks"] = 1 if exports and rng.random() < 0.7 else 0
    else:
        c["prefill_backend"] = rng.choice(["triton", "flashinfer", "flashkda"])
        if c["prefill_backend"] != "flashkda":
            c["num_prefill_checkpoint_blocks"] = 0


def _graph_bs(c):
    d = c["max_num_seqs"] * (c["num_spec"] + 1)
    if c["max_cudagraph_capture_size"] is not None:
        d = min(d, c["max_cudagraph_capture_size"])
    return d


def random_case(
    rng: random.Random,
    kind: str,
    max_groups=4,
    max_prefill_len=3000,
    profile: str | None = None,
    zero_drafts: float = 0.0,
    config: dict | None = None,
) -> dict:
    """A random valid step as a case dict (tools/common/random_step.hpp's random_step).
    profile "vllm-0.34": that profile's configs and steps (prefills resuming on a block
    boundary, resumed non-prefilling rows); zero_drafts: the probability that every spec
    row drafts 0 tokens (0 draws nothing: the stream stays as it was); config: a step of this
    config (a copy, whose max_num_batched_tokens may grow to fit the step) instead of a random
    one."""
    c = dict(config) if config is not None else random_config(rng, kind, profile)
    v034 = profile == "vllm-0.34"
    k, D = c["num_spec"], _graph_bs(c)
    capture = c["full_cuda_graph"] and rng.random() < 0.1 and D >= k + 1
    max_rows = min(c["max_num_seqs"], D // (k + 1)) if capture else c["max_num_seqs"]
    n = rng.randint(1, max_rows)
    pads = rng.randint(0, min(n - 1, 8)) if rng.random() < 0.4 else 0
    shape = rng.randint(0, 4)
    roles = []
    for _ in range(n - pads):
        x = rng.randint(0, 2)
        role = (
            "decode"
            if shape == 0
            else ("spec" if k > 0 else "decode")
            if shape == 1
            else "prefill"
            if shape == 2
            else ("prefill" if x == 0 else "decode")
            if shape == 3
            else ("decode" if x == 0 else "spec" if x == 1 and k > 0 else "prefill")
        )
        if capture:
            role = "spec" if k > 0 and rng.random() < 0.8 else "decode"
        roles.append(role)
    roles = [r for r in roles if r != "prefill"] + [r for r in roles if r == "prefill"]
    roles += ["pad"] * (n - len(roles))

    q = [0] * n
    drafts = [-1] * n
    no_drafts = zero_drafts > 0 and rng.random() < zero_drafts
    fixed = 0
    for i, role in enumerate(roles):
        if role in ("decode", "prefill"):
            q[i] = 1
        if role == "spec":
            drafts[i] = 0 if no_drafts else rng.randint(0 if rng.random() < 0.1 else min(1, k), k)
            q[i] = drafts[i] + 1
        fixed += q[i]
    cap = D if capture else c["max_num_batched_tokens"]
    if fixed > cap:
        capture = False
        cap = max(c["max_num_batched_tokens"], fixed + 16)
    if not capture:
        c["max_num_batched_tokens"] = max(c["max_num_batched_tokens"], cap)
    budget = cap - fixed - (rng.randint(0, min(16, cap - fixed)) if rng.random() < 0.5 else 0)
    for i, role in enumerate(roles):
        if role == "prefill":
            extra = min(budget, rng.randint(0, max_prefill_len - 1))
            q[i] += extra
            budget -= extra

    has_drafts = k > 0 and not capture and rng.random() < 0.9
    has_accepted = k > 0 and not capture
    with_prefilling = kind == "kda" or rng.random() < 0.7
    qsl, seq_lens, ub, accepted, prefilling = [0], [], [], [], []
    for i, role in enumerate(roles):
        qsl.append(qsl[-1] + q[i])
        computed = rng.randint(1, 5000)
        if role == "prefill" and rng.random() < 0.5:
            computed = 0
        if role == "decode" and rng.random() < 0.05:
            computed = 0
        # vllm-0.34 checkpoints need prefills that resume on a block boundary.
        if v034 and role == "prefill" and computed > 0 and rng.random() < 0.4:
            computed = c["block_size"] * rng.randint(1, 8)
        seq = 0 if role == "pad" else computed + q[i]
        ub.append(seq)
        lag = rng.randint(0, q[i] - 1) if role == "spec" and rng.random() < 0.3 else 0
        seq_lens.append(seq - lag)
        accepted.append(rng.randint(1, q[i]) if role == "spec" else 1)
        is_prefilling = role == "prefill" or (role == "decode" and rng.random() < 0.05)
        # A resumed request recomputing past its prompt: long, yet not prefilling.
        if v034 and role == "prefill" and computed > 0 and rng.random() < 0.1:
            is_prefilling = False
        prefilling.append(is_prefilling)
    num_actual = min(cap, qsl[-1] + (rng.randint(0, 16) if rng.random() < 0.3 else 0))

    bs = c["block_size"]
    need = k + 1
    for seq in ub:
        need = max(need, ((seq - 1) // bs if seq > 0 else 0) + c["num_speculative_blocks"] + 1)
        need = max(need, seq // bs + 1)
    width = need + rng.randint(0, 2)
    groups = rng.randint(1, max_groups) if rng.random() < 0.5 else 1
    tables = [
        [[rng.randint(1, 1 << 20) for _ in range(width)] for _ in range(n)] for _ in range(groups)
    ]
    step = {
        "query_start_loc": qsl,
        "seq_lens": seq_lens,
        "seq_lens_cpu_upper_bound": ub,
        "is_prefilling": prefilling if with_prefilling else None,
        "num_actual_tokens": num_actual,
        "block_table": tables[0],
        "num_decode_draft_tokens_cpu": drafts if has_drafts else None,
        "num_accepted_tokens": accepted if has_accepted else None,
    }
    if groups > 1:
        step["groups"] = tables
    return {
        "name": f"random-{kind}",
        "builder": kind,
        "mode": "capture" if capture else "build",
        "config": c,
        "step": step,
    }
