"""linmeta.vllm on CUDA tensors against the seed builders run live on the same GPU, plus a
CUDA graph that reads the FULL-graph outputs across builds. Skips without a CUDA device
(CI); run on the GPU machine (docs/vllm.md). Random steps: a fixed seed (LINMETA_TEST_SEED
overrides it, printed on failure), LINMETA_VLLM_GPU_RANDOM_STEPS of them."""

import json
import os
import random

import pytest

torch = pytest.importorskip("torch")

import linmeta  # noqa: E402
import vllm_oracle_util as u  # noqa: E402

if not (torch.cuda.is_available() and linmeta.cuda_available()):
    pytest.skip("needs torch with a CUDA device", allow_module_level=True)
if not u.oracle_available():
    pytest.skip(u.ORACLE_MISSING, allow_module_level=True)

pytestmark = pytest.mark.gpu

SEEDS, RUNNER, LV = u.load()
CASES = u.load_cases()
DEV = "cuda"
RANDOM_STEPS = int(os.environ.get("LINMETA_VLLM_GPU_RANDOM_STEPS", "1000"))
RUN_SEED = u.test_seed()
CACHE_ONLY_FIELD = "spec_sequence_masks_cpu"


def check(case, max_num_batched_tokens=None, counts_dtype=torch.int32):
    ours, ref, err, _ = u.run_case(SEEDS, RUNNER, LV, case, DEV, max_num_batched_tokens,
                                   counts_dtype)
    torch.cuda.synchronize()
    if err is not None:
        return [f"seed raised {err!r}"]
    out = []
    for g, (o, r) in enumerate(zip(ours, ref)):
        if g > 0 and getattr(r, CACHE_ONLY_FIELD, None) is None and getattr(
                o, CACHE_ONLY_FIELD) is not None:
            out += [f"group {g}: {d}" for d in u.diff(o, r, skip=(CACHE_ONLY_FIELD,))]
            alone = u.independent_reference(SEEDS, RUNNER, case, g, DEV)
            out += [f"group {g} (vs alone): {d}" for d in u.diff(o, alone)]
        else:
            out += [f"group {g}: {d}" for d in u.diff(o, r)]
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_public_case_cuda(case):
    assert check(case) == []


def test_random_steps_cuda():
    """Every fourth step hands build() int64 counts."""
    seed = RUN_SEED
    rng = random.Random(seed)
    failures = []
    for i in range(RANDOM_STEPS):
        case = u.random_case(rng, "gdn" if i % 2 == 0 else "kda")
        dtype = torch.int64 if i % 4 == 3 else torch.int32
        d = check(case, case["config"]["max_num_batched_tokens"], dtype)
        if d and not (len(d) == 1 and "UnboundLocalError" in d[0]):
            failures.append((i, case, d))
    msg = "\n".join(f"step {i}: {d[:3]}\n  case: {json.dumps(c)[:2000]}"
                    for i, c, d in failures[:3])
    assert not failures, f"{len(failures)} differ (LINMETA_TEST_SEED={seed}):\n{msg}"


FULL_FIELDS = (
    "spec_state_indices_tensor",
    "spec_query_start_loc",
    "num_accepted_tokens",
    "spec_sequence_masks",
    "spec_token_indx",
)


@pytest.mark.parametrize("groups", [1, 3])
def test_cuda_graph_reads_full_graph_outputs_across_builds(groups):
    """A graph captured once copies each group's FULL-graph outputs; replayed after every
    later build of the same shape (the batch a graph is captured for: same rows and draft
    counts; new tables, sequence lengths and accepted counts) it sees that build's values —
    the seed's for the same step."""
    seed = RUN_SEED + 7
    rng = random.Random(seed)
    k, rows = 3, 24
    config = {
        "num_spec": k, "max_num_seqs": 32, "full_cuda_graph": True,
        "max_cudagraph_capture_size": None, "mamba_cache_mode": "align", "block_size": 16,
        "num_speculative_blocks": k, "use_recoverssm": False, "num_prefill_checkpoint_blocks": 0,
    }
    objs = u.vllm_objects(RUNNER, config, groups, 4096)
    ours = [LV.GDNAttentionMetadataBuilder(s, n, vc, torch.device(DEV)) for s, n, vc in objs]
    refs = [SEEDS.gdn.GDNAttentionMetadataBuilder(s, n, vc, torch.device(DEV)) for s, n, vc in objs]

    drafts = [rng.randint(1, k) for _ in range(rows - 2)] + [-1, -1]  # 2 padding rows

    def make_step():
        ql = [d + 1 for d in drafts[:-2]] + [0, 0]
        qsl = [0]
        for q in ql:
            qsl.append(qsl[-1] + q)
        seq = [rng.randint(20, 400) + q for q in ql[:-2]] + [0, 0]
        step = {
            "query_start_loc": qsl, "seq_lens": seq, "seq_lens_cpu_upper_bound": seq,
            "is_prefilling": [False] * rows, "num_actual_tokens": qsl[-1],
            "block_table": [[rng.randint(1, 1 << 20) for _ in range(40)] for _ in range(rows)],
            "num_decode_draft_tokens_cpu": drafts,
            "num_accepted_tokens": [rng.randint(1, q) if q else 1 for q in ql],
        }
        tables = [step["block_table"]] + [
            [[rng.randint(1, 1 << 20) for _ in range(40)] for _ in range(rows)]
            for _ in range(groups - 1)
        ]
        base = u.common_metadata(RUNNER, step, tables[0], DEV)
        ms = [base] + [base.replace(block_table_tensor=u._i32(t, DEV)) for t in tables[1:]]
        acc = u._i32(step["num_accepted_tokens"], DEV)
        dr = u._i32(drafts)
        return ms, acc, dr

    ms, acc, dr = make_step()
    mds = [b.build(0, m, acc, dr) for b, m in zip(ours, ms)]
    static = [{f: torch.empty_like(getattr(md, f)) for f in FULL_FIELDS} for md in mds]
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for md, st in zip(mds, static):
            for f in FULL_FIELDS:
                st[f].copy_(getattr(md, f))
    for _ in range(5):
        ms, acc, dr = make_step()
        got = [b.build(0, m, acc, dr) for b, m in zip(ours, ms)]
        graph.replay()
        RUNNER.clear_step_cache(SEEDS)
        want = [b.build(0, m, acc, dr) for b, m in zip(refs, ms)]
        torch.cuda.synchronize()
        for g in range(groups):
            for f in FULL_FIELDS:
                where = f"LINMETA_TEST_SEED={seed} group {g} {f}"
                assert getattr(got[g], f).data_ptr() == getattr(mds[g], f).data_ptr(), where
                assert torch.equal(static[g][f].cpu(), getattr(want[g], f).cpu()), where


@pytest.mark.parametrize("profile", [None, "vllm-0.34"])
def test_update_block_table_cuda(monkeypatch, profile):
    """MRV2's path on CUDA (re-gathering on torch's current stream): equal to the group
    built alone by a native builder and, in the seed profile, to the seed's
    update_block_table. GDN builders on CUDA opt in (vLLM 0.34; the seed under MRV2)."""
    u.set_profile(monkeypatch, LV, profile)
    seed = RUN_SEED + 5
    rng = random.Random(seed)
    compared = 0
    for case, g, got, alone, ref in u.update_block_table_steps(
        SEEDS, RUNNER, LV, rng, max(RANDOM_STEPS // 20, 12), DEV, profile
    ):
        torch.cuda.synchronize()
        where = f"LINMETA_TEST_SEED={seed} group {g} case {json.dumps(case)[:1500]}"
        assert u.diff_native(got, alone) == [], where
        if ref is not None:
            assert u.diff(got, ref) == [], where
            compared += 1
    assert profile is not None or compared > 5, compared
    config = next(c["config"] for c in CASES
                  if c["builder"] == "gdn" and c["config"]["mamba_cache_mode"] == "none")
    spec, names, vc = u.vllm_objects(RUNNER, config, 1)[0]
    vc.use_v2_model_runner = True
    gdn = LV.GDNAttentionMetadataBuilder(spec, names, vc, torch.device(DEV))
    kda = LV.KimiK3KDAMetadataBuilder(spec, names, vc, torch.device(DEV))
    assert gdn.supports_update_block_table is True
    assert kda.supports_update_block_table is False


@pytest.mark.parametrize("index", [False, True], ids=["cuda", "cuda:N"])
def test_builds_run_on_torchs_current_stream(index):
    """build() launches on torch's current stream of the builder's device (read by the engine
    at every launch), for torch.device("cuda") and for an indexed device alike: a table
    written on a side stream behind a long sleep is the one the build (queued behind it on
    the same stream) reads; a build on any other stream would read the old table."""
    dev = f"cuda:{torch.cuda.current_device()}" if index else DEV
    case = next(c for c in CASES if c["builder"] == "gdn" and c["mode"] != "capture"
                and len(c["step"].get("groups", [])) == 4
                and c["config"]["mamba_cache_mode"] != "align")
    _, want, err, (builders, _, ms) = u.run_case(SEEDS, RUNNER, LV, case, dev)
    assert err is None
    acc, drafts = u.step_counts(case["step"], dev)
    new_tables = [m.block_table_tensor + 1000 for m in ms]
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # what follows on `side` waits for this
        for m, t in zip(ms, new_tables):
            m.block_table_tensor.copy_(t)
        got = [b.build(0, m, acc, drafts) for b, m in zip(builders, ms)]
    side.synchronize()
    assert [b._engine.stats["plans"] for b in builders] == [2] * len(builders)
    RUNNER.clear_step_cache(SEEDS)
    refs = [SEEDS.gdn.GDNAttentionMetadataBuilder(*o, torch.device(dev))
            for o in u.vllm_objects(RUNNER, case["config"], len(ms))]
    for g, (o, r, m) in enumerate(zip(got, refs, ms)):
        RUNNER.clear_step_cache(SEEDS)  # each group's reference on its own
        assert u.diff(o, r.build(0, m, acc, drafts)) == [], g
