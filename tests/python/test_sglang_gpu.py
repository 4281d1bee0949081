"""linmeta.sglang's native half (``linmeta._linmeta.sglang.Engine``, docs/sglang.md) on CUDA
tensors against the same engine on CPU tensors, for every kind of ``linmeta.SGLANG_KINDS``:
the random SGLang steps of tests/sglang/sglang_steps.py (every entry point and mode; tracking
with the scheduler's host lists and with device tensors only), handed over as duck-typed
ForwardBatch objects (SGLang is not needed), and compared field by field: values, dtypes,
shapes, which fields are the batch's own tensors or the backend's graph buffers, the side
effects on the batch and every element of the graph buffers (and of KDA's prefill-graph
tables: the bucket's buffers and SGLang's numpy host staging). Skipped without torch and a CUDA
device (but for the check that every kind has random steps). Random steps: a fixed seed (LINMETA_TEST_SEED overrides it), LINMETA_SGLANG_GPU_STEPS
per mode (default 200)."""

import enum
import json
import os
import random
import sys
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

import linmeta  # noqa: E402
from linmeta._linmeta import sglang as native  # noqa: E402
from linmeta.sglang._batch import (  # noqa: E402  (no SGLang import)
    CPU_GRAPH_CAPTURE,
    EAGER,
    GRAPH_CAPTURE,
    GRAPH_REPLAY,
    PREFILL_GRAPH,
    cpu_capture_batch,
)
from vllm_oracle_util import test_seed as run_seed  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sglang"))
import sglang_steps as steps  # noqa: E402  (plain Python: no torch, no SGLang)

needs_cuda = pytest.mark.skipif(
    not (torch.cuda.is_available() and linmeta.cuda_available()),
    reason="needs torch with a CUDA device",
)

STEPS = int(os.environ.get("LINMETA_SGLANG_GPU_STEPS", "200"))
RUN_SEED = run_seed()
CONV_WINDOW = 3  # conv_states_shape[-1] of a kernel of width 4
UNWRITTEN = -7777  # the graph buffers' fill


class ForwardMode(enum.Enum):
    """SGLang's ForwardMode members the engine reads (by name)."""

    EXTEND = 1
    DECODE = 2
    MIXED = 3
    IDLE = 4
    TARGET_VERIFY = 5
    DRAFT_EXTEND_V2 = 6


def backend_of(kind: str) -> str:
    return kind.removeprefix("sglang_")


class Engines:
    """One engine per (configuration, device): what one SGLang backend object holds."""

    def __init__(self, kind: str):
        self.kind = kind
        self.engines = {}

    def get(self, config: str, device: str):
        key = (config, device)
        if key not in self.engines:
            cfg = steps.CONFIGS[config]
            builder = linmeta.MetadataBuilder(
                self.kind,
                max_num_seqs=512,
                max_num_batched_tokens=1 << 17,
                chunk_size=cfg["chunk_size"],
                target="cuda" if device == "cuda" else "host",
                array_type="torch",
            )
            pool = SimpleNamespace(req_index_to_mamba_index_mapping=None)
            # GDN's conv block table as SGLang builds it on CUDA (is_cuda()), ShortConv's
            # host mirrors as SGLang's ShortConvAttnBackend (needs_extend_host_mirrors).
            eng = native.Engine(builder, pool, cfg["cache_chunk_size"], CONV_WINDOW, cfg["topk"],
                                True, True)
            self.engines[key] = (eng, pool)
        return self.engines[key]


def batch(step: dict, device: str):
    """(ForwardBatch-like object, the entry point, the graph buffers or None, ShortConv's
    _cache_indices_buf or None, the caller's tensors by name) of a sglang_steps step on
    `device`."""
    cfg = steps.CONFIGS[step["config"]]
    i64 = lambda v: torch.tensor(v, dtype=torch.int64, device=device)  # noqa: E731
    reqs, seq = step["req_pool_indices"], step["seq_lens"]
    bs = len(reqs)
    mode = ForwardMode[step["forward_mode"]]
    ext = step.get("extend_seq_lens")
    spec = step.get("spec")
    k = spec["draft_token_num"] if spec else 1
    num_tokens = bs * k if mode is ForwardMode.TARGET_VERIFY else sum(ext) if ext else bs
    logical = mode
    if step.get("original_forward_mode") == "DECODE" and mode in (
        ForwardMode.EXTEND, ForwardMode.MIXED, ForwardMode.TARGET_VERIFY
    ):
        logical = ForwardMode.DECODE
    callers = {"req_pool_indices": i64(reqs)}
    spec_info = None
    if spec is not None:
        rnt, rns = spec.get("retrieve_next_token"), spec.get("retrieve_next_sibling")
        callers["retrieve_next_token"] = i64(rnt) if rnt is not None else None
        callers["retrieve_next_sibling"] = i64(rns) if rns is not None else None
        spec_info = SimpleNamespace(
            draft_token_num=k,
            retrieve_next_token=callers["retrieve_next_token"],
            retrieve_next_sibling=callers["retrieve_next_sibling"],
        )
    if step["mode"] == "cpu_capture":
        fb = cpu_capture_batch(bs, num_tokens, callers["req_pool_indices"], i64(seq), mode,
                               spec_info)
    else:
        fb = SimpleNamespace(
            forward_mode=mode,
            logical_forward_mode=logical,
            batch_size=bs,
            req_pool_indices=callers["req_pool_indices"],
            input_ids=SimpleNamespace(shape=(num_tokens,)),
            extend_num_tokens=sum(ext) if ext is not None else None,
            extend_seq_lens_cpu=list(ext) if ext is not None else None,
            extend_prefix_lens_cpu=list(step["extend_prefix_lens"]) if ext is not None else None,
            seq_lens_cpu=torch.tensor(seq, dtype=torch.int64),
            num_padding=step.get("num_padding"),
            spec_info=spec_info,
            _original_batch_size=step.get("original_batch_size"),
        )
        track = step.get("track")
        if track is not None:
            fb.mamba_track_mask = torch.tensor(track["mask"], dtype=torch.bool, device=device)
            fb.mamba_track_indices = callers["mamba_track_indices"] = i64(track["indices"])
            if track["seqlens"] is not None:
                fb.mamba_track_seqlens = i64(track["seqlens"])
            if track["cpu_lists"]:
                fb.mamba_prefill_track_mask_cpu = list(track["mask"])
                fb.mamba_track_seqlens_cpu = list(track["seqlens"])
    entry = {"capture": GRAPH_CAPTURE, "replay": GRAPH_REPLAY, "cpu_capture": CPU_GRAPH_CAPTURE,
             "prefill_graph": PREFILL_GRAPH}.get(step["mode"], EAGER)
    graph = None
    if entry == PREFILL_GRAPH:
        graph = prefill_graph_tables(step, cfg, device, callers)
    elif entry != EAGER:
        # The backend's static buffers of this batch size (init_cuda_graph_state's), as
        # linmeta.sglang's backend hands them over.
        gk = max(1, cfg["draft_tokens"])
        fill = lambda *shape, dtype=torch.int32: torch.full(  # noqa: E731
            shape, UNWRITTEN, dtype=dtype, device=device)
        callers["state_indices_list[bs-1]"] = fill(bs)
        callers["query_start_loc_list[bs-1]"] = fill(bs + 1)
        tree = mode is ForwardMode.TARGET_VERIFY and cfg["topk"] > 1
        graph = [callers["state_indices_list[bs-1]"], callers["query_start_loc_list[bs-1]"],
                 None, None, None, None]
        if entry != CPU_GRAPH_CAPTURE:
            callers["mamba_track_indices_buf"] = fill(steps.GRAPH_MAX_BS, dtype=torch.int64)
            if getattr(fb, "mamba_track_indices", None) is not None:
                graph[2] = callers["mamba_track_indices_buf[:bs]"] = (
                    callers["mamba_track_indices_buf"][:bs])
            if tree:
                for i, name in enumerate(("retrieve_next_token", "retrieve_next_sibling",
                                          "retrieve_parent_token"), start=3):
                    graph[i] = callers[f"{name}_list[bs-1]"] = fill(bs, gk)
        graph = tuple(graph)
    # ShortConv's _cache_indices_buf: made with the graph state (an eager step's world may
    # have one: sglang_steps.py's graph_state).
    cache_buf = None
    if entry != EAGER or step.get("graph_state", "none") != "none":
        cache_buf = callers["_cache_indices_buf"] = torch.full(
            (steps.GRAPH_MAX_BS,), UNWRITTEN, dtype=torch.int64, device=device)
    return fb, entry, graph, cache_buf, callers


def prefill_graph_tables(step: dict, cfg: dict, device: str, callers: dict):
    """KDA's KDAPrefillGraphMetadata of the step's bucket, as SGLang's allocate makes it
    (SGLANG_KDA_PREFILL_GRAPH_MAX_SEQS = 128; a numpy host staging), its buffers among the
    caller's tensors."""
    tokens = step["bucket_tokens"]
    max_seqs = max(1, min(tokens, 128))
    chunks = -(-tokens // 64) + max_seqs
    blocks = -(-tokens // 8) + max_seqs
    total = 2 * (max_seqs + 1) + 2 * chunks + 2 * blocks + 3 * max_seqs + 1
    zeros = lambda n, dtype: torch.zeros(n, dtype=dtype, device=device)  # noqa: E731
    callers["prefill_graph.packed"] = zeros(total, torch.int32)
    callers["prefill_graph.host"] = np.zeros(total, dtype=np.int32)
    callers["prefill_graph.cache_indices"] = torch.full(
        (max_seqs,), -1, dtype=torch.int32, device=device)
    callers["prefill_graph.has_initial_state"] = zeros(max_seqs, torch.bool)
    callers["prefill_graph.track_dst"] = zeros(max_seqs, torch.int64)
    return SimpleNamespace(
        num_tokens=tokens, max_seqs=max_seqs, track=bool(cfg.get("extra_buffer")),
        flashinfer=None,
        **{k.removeprefix("prefill_graph."): v for k, v in callers.items()
           if k.startswith("prefill_graph.")},
    )


def plain(value, callers: dict, key: str = ""):
    """`value` as plain Python: a caller's tensor by its name, tensors as (dtype, shape,
    values, device type), dicts recursively. Eager tree verify's retrieve_parent_token is
    SGLang's torch.empty_like: its values are undefined."""
    for name, obj in callers.items():
        if obj is not None and value is obj:
            return ("caller", name)
    if isinstance(value, dict):
        return {k: plain(v, callers, k) for k, v in value.items()}
    if isinstance(value, torch.Tensor):
        values = None if key == "retrieve_parent_token" else value.cpu().tolist()
        return (str(value.dtype), tuple(value.shape), values, value.device.type)
    return value


def devices(value) -> set:
    if isinstance(value, dict):
        return set().union(*(devices(v) for v in value.values())) if value else set()
    if isinstance(value, tuple) and len(value) == 4:
        return {value[3]}
    return set()


def without_devices(value):
    if isinstance(value, dict):
        return {k: without_devices(v) for k, v in value.items()}
    if isinstance(value, tuple) and len(value) == 4:
        return value[:3]
    return value


def run(engines: Engines, step: dict, device: str):
    """(the fields, the caller's tensors afterwards) of `step` built on `device`."""
    eng, pool = engines.get(step["config"], device)
    mapping = torch.zeros(steps.POOL_SIZE + 1, dtype=torch.int32)
    slots = step["mamba_slots"]
    mapping[torch.tensor(step["req_pool_indices"][: len(slots)])] = torch.tensor(
        slots, dtype=torch.int32)
    pool.req_index_to_mamba_index_mapping = mapping.to(device)
    fb, entry, graph, cache_buf, callers = batch(step, device)
    try:
        fields = eng.build(fb, entry, graph, cache_buf)
    except linmeta.Error as e:
        return ("error", str(e)), None
    if device == "cuda":
        torch.cuda.synchronize()
    got = plain(fields, callers)
    after = {name: t.cpu().tolist() if isinstance(t, torch.Tensor) else t.tolist()
             for name, t in callers.items() if t is not None}
    return got, after


def modes_of(kind: str):
    backend = backend_of(kind)
    return list(steps.BACKEND_MODES.get(backend, ()))


PARAMS = [(kind, mode) for kind in linmeta.SGLANG_KINDS for mode in modes_of(kind)]


def test_every_sglang_kind_has_random_steps():
    """Each kind of linmeta.SGLANG_KINDS is sglang_steps.py's backend of its name."""
    missing = [k for k in linmeta.SGLANG_KINDS if not modes_of(k)]
    assert not missing, f"no random steps (tests/sglang/sglang_steps.py) for {missing}"


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize(("kind", "mode"), PARAMS, ids=[f"{k}-{m}" for k, m in PARAMS])
def test_cuda_engine_matches_cpu_engine(kind, mode):
    seed = RUN_SEED
    rng = random.Random(f"{seed}-{kind}-{mode}")
    engines = Engines(kind)
    failures = []
    built = 0
    for i in range(STEPS):
        step = steps.make_step(backend_of(kind), mode, rng)
        want, want_after = run(engines, step, "cpu")
        got, got_after = run(engines, step, "cuda")
        problems = []
        if isinstance(want, tuple) or isinstance(got, tuple):  # an error
            if want != got:
                problems.append(f"cpu {want}, cuda {got}")
        else:
            built += 1
            if without_devices(got) != without_devices(want):
                diff = sorted(k for k in set(got) | set(want)
                              if without_devices(got.get(k)) != without_devices(want.get(k)))
                problems.append(f"fields differ: {diff}")
            if devices(got) - {"cuda"}:
                problems.append(f"cuda build returned tensors on {sorted(devices(got))}")
            if got_after != want_after:
                diff = sorted(k for k in want_after if got_after.get(k) != want_after[k])
                problems.append(f"the batch's tensors / graph buffers differ afterwards: {diff}")
        if problems:
            failures.append(f"step {i}: {'; '.join(problems)}\n    {json.dumps(step)}")
            if len(failures) >= 5:
                break
    assert not failures, (f"{len(failures)} steps differ (LINMETA_TEST_SEED={seed}):\n"
                          + "\n".join(failures))
    assert built > 0, "every step was rejected"
