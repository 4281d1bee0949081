"""linmeta.vllm correct by construction (issue 40): each test holds one defect class of the
adapter's former speed devices to the answer of fresh builders (or the seed), so that it fails
where a builder serves anything but the step it was handed.

* one builder object, one engine: builder objects of one configuration share nothing (two
  threads, each with its own builders, get their own steps' answers);
* re-entry (an input's __array_interface__ / __dlpack__ that builds) and concurrent use of one
  builder object are refused with linmeta.Error, never served;
* inputs updated in place between steps (int64 counts, the CommonAttentionMetadata tensors)
  are read afresh on every call;
* every result hands out new view objects: in-place view operations on one step's tensors
  (t_, squeeze_, as_strided_) change no later result;
* the native engine is visible to the garbage collector (a result that refers back to its
  builder is collected), and no input type is kept alive by the import.

Random inputs take fixed seeds (LINMETA_TEST_SEED overrides), printed on failure.
"""

import gc
import subprocess
import sys
import threading
import warnings
import weakref

import pytest

torch = pytest.importorskip("torch")

import vllm_oracle_util as u  # noqa: E402
from hostile_cases import Reenter, in_two_threads  # noqa: E402

if not u.oracle_available():
    pytest.skip(f"the seed oracle is not at {u.ORACLE_DIR}", allow_module_level=True)

import linmeta  # noqa: E402

SEEDS, RUNNER, LV = u.load()
CASES = u.load_cases()
RUN_SEED = u.test_seed()
CPU = torch.device("cpu")


def case_of(pred):
    return next(c for c in CASES if pred(c))


def spec_case(kind="gdn"):
    """A build step of `kind` with spec rows, a decode and a prefill (GDN: E3; KDA: K4)."""
    return case_of(lambda c: c["name"].startswith("E3 " if kind == "gdn" else "K4 "))


def fresh(case, counts_dtype=torch.int32):
    """`case` built by a new linmeta.vllm builder object (its first call)."""
    ms, (acc, drafts) = u.group_metadata(RUNNER, case, "cpu", counts_dtype)
    return fresh_build(case, ms[0], acc, drafts)


def fresh_build(case, m, acc, drafts):
    """The step of `m` built by a new linmeta.vllm builder object of `case`'s kind and
    configuration (its first call)."""
    b = u.classes(SEEDS, LV, case["builder"])[1](*u.vllm_objects(RUNNER, case["config"], 1)[0],
                                                 CPU)
    return u.call(b, case["mode"], m, acc, drafts)


def tensors(md):
    return {k: v for k, v in vars(md).items() if isinstance(v, torch.Tensor)}


# ----------------------------------------------------------------- one builder, one engine


def test_builder_objects_share_no_engine():
    """Each builder object has its own engine and native builder, whatever its
    configuration: nothing the caller does not share is shared."""
    case = spec_case()
    objs = u.vllm_objects(RUNNER, case["config"], 3)
    bs = [LV.GDNAttentionMetadataBuilder(*o, CPU) for o in objs]
    assert len({id(b._engine) for b in bs}) == 3
    assert len({id(b._engine.builder) for b in bs}) == 3
    assert all(b._engine.builder.num_groups == 1 for b in bs)


def _thread_steps(seed, n):
    """`n` random GDN steps of one configuration (a fixed generator)."""
    import random

    rng = random.Random(seed)
    config = u.random_case(rng, "gdn")["config"]
    steps = []
    while len(steps) < n:
        c = u.random_case(rng, "gdn", config=config, max_prefill_len=200)
        if c["mode"] == "build" and not c["step"].get("groups"):
            steps.append(c)
    return config, steps


def test_two_threads_with_builders_of_one_configuration():
    """Two threads, each with its own builder object of one configuration, build different
    steps with a tiny GIL switch interval: every result is its own step's (the engine shared
    by a configuration's builders served ~1-2 % of them the other thread's counts, or refused
    valid steps)."""
    config, steps = _thread_steps(RUN_SEED + 40, 60)
    tokens = 1 << 16
    objs = u.vllm_objects(RUNNER, config, 2, tokens)
    want = {}
    for i, c in enumerate(steps):
        b = LV.GDNAttentionMetadataBuilder(*u.vllm_objects(RUNNER, config, 1, tokens)[0], CPU)
        m = u.common_metadata(RUNNER, c["step"], c["step"]["block_table"])
        md = b.build(0, m, *u.step_counts(c["step"]))
        want[i] = (md.num_prefills, md.num_decodes, md.num_spec_decodes,
                   md.num_actual_tokens)
    inputs = []
    for c in steps:  # the host input read through Python code: GIL switches inside builds
        m = u.common_metadata(RUNNER, c["step"], c["step"]["block_table"])
        inputs.append((m.replace(query_start_loc_cpu=_SlowIface(m.query_start_loc_cpu)),
                       u.step_counts(c["step"])))
    errors = []

    def run(t):
        b = LV.GDNAttentionMetadataBuilder(*objs[t], CPU)
        try:
            for _ in range(4):
                for i in range(t, len(steps), 2):
                    m, (acc, drafts) = inputs[i]
                    md = b.build(0, m, acc, drafts)
                    got = (md.num_prefills, md.num_decodes, md.num_spec_decodes,
                           md.num_actual_tokens)
                    if got != want[i]:
                        errors.append((t, i, got, want[i]))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((t, repr(e)))

    in_two_threads(run)
    assert errors == [], f"LINMETA_TEST_SEED={RUN_SEED}: {errors[:5]}"


class _SlowIface:
    """An array read through __array_interface__, a Python property: the GIL may switch to
    another thread while the builder imports it."""

    def __init__(self, t):
        self._t = t

    @property
    def __array_interface__(self):
        for _ in range(50):  # Python work: a GIL switch point
            pass
        return self._t.numpy().__array_interface__


def test_one_builder_from_two_threads_is_refused_or_right():
    """One builder object used from two threads at once: a call that enters while the other
    runs raises linmeta.Error (never served: the engine's one call slot was corrupted, a
    reference released twice); every call that returns has its own step's answer."""
    config, steps = _thread_steps(RUN_SEED + 41, 2)
    b = LV.GDNAttentionMetadataBuilder(*u.vllm_objects(RUNNER, config, 1, 1 << 16)[0], CPU)
    want, inputs = [], []
    for c in steps:
        m = u.common_metadata(RUNNER, c["step"], c["step"]["block_table"])
        counts = u.step_counts(c["step"])
        md = fresh_build(dict(c, config=config), m, *counts)
        want.append((md.num_prefills, md.num_decodes, md.num_spec_decodes,
                     md.num_actual_tokens))
        inputs.append((m.replace(query_start_loc_cpu=_SlowIface(m.query_start_loc_cpu)), counts))
    wrong, refused, other = [], [0], []
    start = threading.Barrier(2)

    def run(i):
        m, (acc, drafts) = inputs[i]
        start.wait()
        for _ in range(3000):  # until a few calls overlapped (a few hundred calls, typically)
            if refused[0] >= 5:
                break
            try:
                md = b.build(0, m, acc, drafts)
            except linmeta.Error as e:
                if "entered while another call of the same builder" not in str(e):
                    other.append(repr(e))
                refused[0] += 1
                continue
            except Exception as e:  # noqa: BLE001
                other.append(repr(e))
                continue
            got = (md.num_prefills, md.num_decodes, md.num_spec_decodes, md.num_actual_tokens)
            if got != want[i]:
                wrong.append((i, got, want[i]))

    in_two_threads(run)
    assert wrong == [] and other == [], (wrong[:3], other[:3])
    assert refused[0] > 0, "no call overlapped: the test did not test concurrency"


@pytest.mark.parametrize("how", ["array_interface", "dlpack"])
def test_reentry_from_an_input_is_refused(how):
    """A build entered from an input's __array_interface__ / __dlpack__ while the same
    builder object imports the outer call's inputs raises linmeta.Error; the outer build
    is its own step's (it carried the inner step's seq_lens, and a reference was released
    twice)."""
    case = spec_case()
    ms, (acc, drafts) = u.group_metadata(RUNNER, case)
    other = next(c for c in CASES if c["builder"] == "gdn" and c["mode"] == "build"
                 and c["config"] == case["config"] and c["step"] != case["step"]
                 and not c["step"].get("groups"))
    b = LV.GDNAttentionMetadataBuilder(*u.vllm_objects(RUNNER, case["config"], 1)[0], CPU)
    m_other = u.common_metadata(RUNNER, other["step"], other["step"]["block_table"])
    inner = lambda: b.build(0, m_other, *u.step_counts(other["step"]))  # noqa: E731
    bad = Reenter(ms[0].seq_lens_cpu_upper_bound, inner, dlpack=how == "dlpack")
    md = b.build(0, ms[0].replace(seq_lens_cpu_upper_bound=bad), acc, drafts)
    assert isinstance(bad.raised, linmeta.Error), bad.raised
    assert "entered while another call of the same builder" in str(bad.raised)
    assert u.diff(md, fresh(case)) == []
    counts = u.step_counts(other["step"])
    again = b.build(0, m_other, *counts)  # the builder still works
    assert u.diff(again, fresh_build(case, m_other, *counts)) == []


# ------------------------------------------------------------ inputs updated in place


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_int64_counts_updated_in_place_are_read_again(kind):
    """int64 counts (vLLM before 0.34) updated in place for the next step: the next build
    reads the new values (they were converted once per tensor object and the old copies
    served: 2 prefills where the step has 2 spec decodes)."""
    case = spec_case(kind)
    s = case["step"]
    ms, (acc, drafts) = u.group_metadata(RUNNER, case, "cpu", torch.int64)
    b = u.classes(SEEDS, LV, kind)[1](*u.vllm_objects(RUNNER, case["config"], 1)[0], CPU)
    b.build(0, ms[0], acc, drafts)
    # The next step: every row a spec decode of k + 1 tokens (same tensors, new values).
    k = case["config"]["num_spec"]
    n = len(s["seq_lens"])
    step2 = dict(s, query_start_loc=[i * (k + 1) for i in range(n + 1)],
                 is_prefilling=[False] * n, num_actual_tokens=n * (k + 1),
                 num_accepted_tokens=[1 + i % (k + 1) for i in range(n)],
                 num_decode_draft_tokens_cpu=[k] * n,
                 seq_lens=[x + k + 1 for x in s["seq_lens"]],
                 seq_lens_cpu_upper_bound=[x + k + 1 for x in s["seq_lens"]])
    step2.pop("groups", None)
    case2 = dict(case, step=step2)
    m2 = u.common_metadata(RUNNER, step2, s["block_table"])
    acc.copy_(torch.tensor(step2["num_accepted_tokens"]))
    drafts.copy_(torch.tensor(step2["num_decode_draft_tokens_cpu"]))
    got = b.build(0, m2, acc, drafts)
    want = fresh(case2, counts_dtype=torch.int64)
    assert (got.num_prefills, got.num_spec_decodes) == (0, n)
    assert u.diff(got, want, skip=("recoverssm_context",)) == []


def test_a_group_not_built_every_step_reads_tensors_updated_in_place():
    """Two groups; a step only group 0 builds; then the CommonAttentionMetadata tensors
    updated in place for the next step, which only group 1 builds: it gets the new step (the
    same-step cache served it group 0's plan of the step before: the same objects)."""
    case = spec_case()
    m0 = u.group_metadata(RUNNER, case)[0][0]
    acc, drafts = u.step_counts(case["step"])
    ms = [m0, m0.replace(block_table_tensor=m0.block_table_tensor + 1)]
    objs = u.vllm_objects(RUNNER, case["config"], 2)
    bs = [LV.GDNAttentionMetadataBuilder(*o, CPU) for o in objs]
    for b, m in zip(bs, ms):
        b.build(0, m, acc, drafts)
    bs[0].build(0, ms[0], acc, drafts)  # a step group 1 does not build
    # The next step in the same tensors: the spec row's draft accepted in full, the decode
    # row now a spec row, every sequence longer (only group 1 builds it).
    old = (m0.seq_lens.clone(), acc.clone(), drafts.clone())
    for t in (m0.seq_lens, m0.seq_lens_cpu_upper_bound):
        t += 3
    acc.fill_(1)
    got = bs[1].build(0, ms[1], acc, drafts)
    want = fresh_build(case, ms[1], acc, drafts)
    assert u.diff(got, want) == []
    assert not torch.equal(old[0], m0.seq_lens) and not torch.equal(old[1], acc)


# ------------------------------------------------------------------------ fresh views


@pytest.mark.parametrize("op", ["t_", "squeeze_", "as_strided_", "resize_"])
def test_in_place_view_operations_change_no_later_result(op):
    """A consumer's in-place view operation on a result's tensors (vLLM's layers may
    squeeze_ a 1-D state index tensor): the next result of the same step is unchanged
    (tensor objects were handed out again)."""
    case = spec_case()
    ms, (acc, drafts) = u.group_metadata(RUNNER, case)
    b = LV.GDNAttentionMetadataBuilder(*u.vllm_objects(RUNNER, case["config"], 1)[0], CPU)
    first = b.build(0, ms[0], acc, drafts)
    own = {k: v for k, v in tensors(first).items()
           if v is not acc and v is not ms[0].seq_lens and v is not ms[0].query_start_loc
           and v is not ms[0].block_table_tensor}
    assert own
    for v in own.values():
        if op == "t_" and v.dim() <= 2:
            v.t_()
        elif op == "squeeze_":
            v.unsqueeze_(0).squeeze_(-1) if v.dim() == 1 else v.squeeze_()
        elif op == "as_strided_" and v.numel() > 0:
            v.as_strided_((1,), (1,))
        elif op == "resize_":
            v.resize_(0)
    second = b.build(0, ms[0], acc, drafts)
    assert u.diff(second, fresh(case)) == []
    assert all(second.__dict__[k] is not v for k, v in own.items())


def test_one_result_carries_one_tensor_per_memory():
    """Within one result the same memory is one object (nums_dict's batch_ptr is the
    result's batch_ptr, as vLLM's); across results they are new objects."""
    case = spec_case()
    ms, (acc, drafts) = u.group_metadata(RUNNER, case)
    b = LV.GDNAttentionMetadataBuilder(*u.vllm_objects(RUNNER, case["config"], 1)[0], CPU)
    a, c = (b.build(0, ms[0], acc, drafts) for _ in range(2))
    assert a.nums_dict[8]["batch_ptr"] is a.batch_ptr
    assert a.batch_ptr is not c.batch_ptr and a.batch_ptr.data_ptr() == c.batch_ptr.data_ptr()


# --------------------------------------------------------------- objects and the collector


def test_engine_takes_only_a_metadata_builder():
    """linmeta._linmeta.vllm.Engine(object(), ...) segfaulted (no type check)."""
    cls = LV.local.local_class("gdn")
    for bad in (object(), None, 42, LV.local):
        with pytest.raises(TypeError, match="Engine takes a linmeta.MetadataBuilder"):
            linmeta._linmeta.vllm.Engine(bad, cls, {}, {})
    two = linmeta.MetadataBuilder("gdn", num_groups=2, array_type="torch")
    with pytest.raises(linmeta.Error, match="one KV-cache group"):
        linmeta._linmeta.vllm.Engine(two, cls, {}, {})


def test_engine_scratch_names_fields_of_the_metadata_class():
    """The ReplaySSM scratch an engine hands out as views: only fields of its metadata class
    (a misspelt name would add an attribute vLLM's dataclass does not have)."""
    cls = LV.local.local_class("mamba1")
    b = linmeta.MetadataBuilder("mamba1", profile="vllm-0.34", use_replayssm=True,
                                array_type="torch")
    scratch = torch.zeros(8, dtype=torch.int32)
    for bad in ({"write_pos": scratch}, {1: scratch}):
        with pytest.raises(linmeta.Error, match="names no field of the metadata class"):
            linmeta._linmeta.vllm.Engine(b, cls, {}, {}, bad)


def test_a_result_referring_to_its_builder_is_collected():
    """A result that refers back to its builder object (KDA's RecoverSSM binding does) makes
    a cycle through the native engine: the collector sees it and frees builder, engine and
    native builder."""
    case = spec_case()
    ms, (acc, drafts) = u.group_metadata(RUNNER, case)
    b = LV.GDNAttentionMetadataBuilder(*u.vllm_objects(RUNNER, case["config"], 1)[0], CPU)
    md = b.build(0, ms[0], acc, drafts)
    md.owner = b  # the cycle: b -> engine -> md.__dict__ -> b
    refs = [weakref.ref(b), weakref.ref(b._engine), weakref.ref(b._engine.builder)]
    del b, md
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


def test_a_metadata_kept_on_its_builder_is_collected():
    """The generic API: a Metadata kept on (a subclass of) its builder is a cycle through the
    native Metadata, which the collector sees."""
    b = linmeta.GdnMetadataBuilder(array_type="numpy")
    import numpy as np

    i32 = np.int32
    b.md = b.build(query_start_loc_cpu=np.array([0, 1], i32), seq_lens=np.array([5], i32),
                   seq_lens_cpu_upper_bound=np.array([5], i32), num_actual_tokens=1,
                   block_table=np.ones((1, 4), i32))
    ref = weakref.ref(b)
    del b
    gc.collect()
    assert ref() is None


def test_input_types_are_not_kept_alive():
    """An input class read once (its type's DLPack exchange table looked up) is freed with
    its last instance: the import caches no type (it kept the first 16 for good)."""
    code = r"""
import gc, weakref, numpy as np, linmeta
i32 = np.int32
b = linmeta.GdnMetadataBuilder(array_type="numpy")
class Arr:
    def __init__(self, a): self.a = a
    @property
    def __array_interface__(self): return self.a.__array_interface__
b.build(query_start_loc_cpu=Arr(np.array([0, 1], i32)), seq_lens=np.array([5], i32),
        seq_lens_cpu_upper_bound=np.array([5], i32), num_actual_tokens=1,
        block_table=np.ones((1, 4), i32))
ref = weakref.ref(Arr)
del Arr
gc.collect()
print("alive" if ref() is not None else "freed")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "freed"


# --------------------------------------------------------------------------- raw memory


def _odd_bool(t):
    raw = t.to(torch.uint8).clone()
    raw[0] = 2
    return raw.view(torch.bool)


def test_bool_bytes_other_than_0_and_1_are_refused():
    """is_prefilling holding byte 2 (a uint8 tensor viewed as bool): refused naming the
    field and row (KDA's split read the byte as it is)."""
    case = spec_case("kda")
    ms, (acc, drafts) = u.group_metadata(RUNNER, case)
    b = LV.KimiK3KDAMetadataBuilder(*u.vllm_objects(RUNNER, case["config"], 1)[0], CPU)
    m = ms[0].replace(is_prefilling=_odd_bool(ms[0].is_prefilling))
    with pytest.raises(linmeta.Error, match=r"is_prefilling\[0\] holds the byte 2"):
        b.build(0, m, acc, drafts)


@pytest.mark.skipif(not hasattr(torch, "_neg_view"), reason="torch has no negative bit")
def test_tensors_with_the_negative_bit_are_refused():
    """A torch tensor with the negative bit set (torch._neg_view) holds its values negated:
    refused naming the field (state indices came out negated)."""
    case = spec_case()
    ms, (acc, drafts) = u.group_metadata(RUNNER, case)
    b = LV.GDNAttentionMetadataBuilder(*u.vllm_objects(RUNNER, case["config"], 1)[0], CPU)
    table = torch._neg_view(-ms[0].block_table_tensor)  # equal values, negative bit
    assert table.is_neg() and torch.equal(table, ms[0].block_table_tensor)
    with pytest.raises(linmeta.Error, match="block_table.*negative bit"):
        b.build(0, ms[0].replace(block_table_tensor=table), acc, drafts)
    with pytest.raises(linmeta.Error, match="num_accepted_tokens.*negative bit"):
        b.build(0, ms[0], torch._neg_view(-acc), drafts)


@pytest.mark.skipif(not hasattr(torch, "nested"), reason="torch has no nested tensors")
def test_nested_tensors_are_refused_naming_the_field():
    case = spec_case()
    ms, (acc, drafts) = u.group_metadata(RUNNER, case)
    b = LV.GDNAttentionMetadataBuilder(*u.vllm_objects(RUNNER, case["config"], 1)[0], CPU)
    with warnings.catch_warnings():  # torch 1.13: nested tensors are a prototype
        warnings.simplefilter("ignore")
        nested = torch.nested.nested_tensor([ms[0].seq_lens_cpu_upper_bound])
    with pytest.raises(TypeError, match="seq_lens_cpu_upper_bound: a nested torch tensor"):
        b.build(0, ms[0].replace(seq_lens_cpu_upper_bound=nested), acc, drafts)

