"""linmeta.vllm on CUDA tensors against the seed builders run live on the same GPU, plus a
CUDA graph that reads the FULL-graph outputs across builds. Skips without a CUDA device
(CI); run on the GPU machine (docs/vllm.md)."""

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
    pytest.skip(f"the seed oracle is not at {u.ORACLE_DIR}", allow_module_level=True)

pytestmark = pytest.mark.gpu

SEEDS, RUNNER, LV = u.load()
CASES = u.load_cases()
DEV = "cuda"
RANDOM_STEPS = int(os.environ.get("LINMETA_VLLM_GPU_RANDOM_STEPS", "1000"))
# Fixed unless LINMETA_TEST_SEED is set (docs/testing.md): every run, CI's included, draws the
# same steps; LINMETA_TEST_SEED=N draws others and repeats them for the same N.
RUN_SEED = int(os.environ.get("LINMETA_TEST_SEED", "1"))
CACHE_ONLY_FIELD = "spec_sequence_masks_cpu"


def check(case, max_num_batched_tokens=None):
    ours, ref, err, _ = u.run_case(SEEDS, RUNNER, LV, case, DEV, max_num_batched_tokens)
    torch.cuda.synchronize()
    if err is not None:
        return [f"seed raised {err!r}"]
    out = []
    for g, (o, r) in enumerate(zip(ours, ref)):
        if g > 0 and getattr(r, CACHE_ONLY_FIELD, None) is None and getattr(o, CACHE_ONLY_FIELD) is not None:
            out += [f"group {g}: {d}" for d in u.diff(o, r, skip=(CACHE_ONLY_FIELD,))]
            alone = u.independent_reference(SEEDS, RUNNER, case, g, DEV)
            out += [f"group {g} (vs alone): {d}" for d in u.diff(o, alone)]
        else:
            out += [f"group {g}: {d}" for d in u.diff(o, r)]
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_public_case_cuda(case):
    assert check(case) == []


@pytest.mark.parametrize("prefetch", [False, True])
def test_random_steps_cuda(prefetch, monkeypatch):
    monkeypatch.setattr(LV, "_PREFETCH_TABLES", prefetch)
    rng = random.Random(RUN_SEED + prefetch)
    failures = []
    for i in range(RANDOM_STEPS):
        case = u.random_case(rng, "gdn" if i % 2 == 0 else "kda")
        d = check(case, case["config"]["max_num_batched_tokens"])
        if d and not (len(d) == 1 and "UnboundLocalError" in d[0]):
            failures.append((i, case, d))
    msg = "\n".join(f"step {i}: {d[:3]}\n  case: {json.dumps(c)[:2000]}" for i, c, d in failures[:3])
    assert not failures, f"{len(failures)} differ (LINMETA_TEST_SEED={RUN_SEED}):\n{msg}"


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
    rng = random.Random(7)
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
                assert getattr(got[g], f).data_ptr() == getattr(mds[g], f).data_ptr(), f
                assert torch.equal(static[g][f].cpu(), getattr(want[g], f).cpu()), (g, f)


def test_update_block_table_cuda():
    """MRV2's path on CUDA (the C++ update_block_table, re-gathering on torch's current
    stream): equal to the Python path and to the seed's update_block_table."""
    rng = random.Random(RUN_SEED + 5)
    compared = 0
    for case, g, got, want, seed in u.update_block_table_steps(
        SEEDS, RUNNER, LV, rng, max(RANDOM_STEPS // 20, 12), DEV
    ):
        torch.cuda.synchronize()
        assert u.diff(got, want) == [], (case, g)
        if seed is not None:
            assert u.diff(got, seed) == [], (case, g)
            compared += 1
    assert compared > 5, compared


@pytest.mark.parametrize("index", [False, True], ids=["cuda", "cuda:N"])
def test_builds_run_on_torchs_current_stream_read_in_cpp(index, monkeypatch):
    """build() launches on torch's current stream of the builder's device, read in C++ (no
    Python stream function) for torch.device("cuda") and for an indexed device alike."""
    dev = f"cuda:{torch.cuda.current_device()}" if index else DEV
    case = next(c for c in CASES if c["builder"] == "gdn" and c["mode"] != "capture"
                and len(c["step"].get("groups", [])) == 4)
    _, want, err, (builders, _, ms) = u.run_case(SEEDS, RUNNER, LV, case, dev)
    assert err is None
    engine = builders[0]._engine
    reads = []
    real = engine.current_stream
    monkeypatch.setattr(engine, "current_stream", lambda: reads.append(1) or real())
    for b in builders:
        b._install_fast_build()  # the state holds the stream function: take the counted one
    acc, drafts = u.step_counts(case["step"], dev)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # the build's copies queue behind this on `side`
        got = [b.build(0, m, acc, drafts) for b, m in zip(builders, ms)]
    assert reads == []
    side.synchronize()
    for g, (o, r) in enumerate(zip(got, want)):  # the seed's later groups: from its cache
        assert u.diff(o, r, skip=(CACHE_ONLY_FIELD,) if g > 0 else ()) == [], g
