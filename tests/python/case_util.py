"""Case files (docs/case-format.md) in Python: the mapping of a JSON case onto a
linmeta build and the comparison rules of tools/case_file.cpp, written against the Python API
(the output table linmeta.OUTPUT_FIELDS decides which fields a kind records)."""

import functools
import json
import os

import linmeta

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
# Every case file of tests/data with expected outputs, and the files of failing steps.
CASE_FILES = ("public", "vllm034_public", "vllm034", "vllm034_mamba_public", "vllm034_mamba",
              "vllm034_inkling", "vllm034_replayssm")
ERROR_FILES = ("seed_errors", "vllm034_mamba_public_errors")


# The keys of a case, its step and its error (docs/case-format.md; tools/case_file.cpp reads the
# same). The config's are the builder's keyword arguments but the one the builder derives.
CASE_KEYS = {"name", "builder", "mode", "config", "step", "expected", "expected_groups", "error",
             "comment"}
STEP_KEYS = {"query_start_loc", "seq_lens", "seq_lens_cpu_upper_bound", "is_prefilling",
             "num_actual_tokens", "block_table", "groups", "num_decode_draft_tokens_cpu",
             "num_accepted_tokens"}
ERROR_KEYS = {"type", "message", "where", "line"}
DERIVED_CONFIG_KEYS = {"chunk_metadata"}


@functools.lru_cache(maxsize=None)
def config_keys():
    return frozenset(linmeta.MetadataBuilder("gdn").config) - DERIVED_CONFIG_KEYS


def check_keys(case, where):
    """Raises ValueError naming the first key of the case, its config, step or error that the
    format does not define; `where` is "FILE:LINE"."""
    for part, known in (("", CASE_KEYS), ("config", config_keys()), ("step", STEP_KEYS),
                        ("error", ERROR_KEYS)):
        obj = case.get(part) if part else case
        for key in obj if isinstance(obj, dict) else ():
            if key not in known:
                raise ValueError(f"{where}: {part + ': ' if part else ''}unknown key {key!r}")


def load_cases(name="public"):
    path = os.path.join(DATA, name + ".jsonl")
    out = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                out.append(json.loads(line))
                check_keys(out[-1], f"{path}:{number}")
    return out


def all_cases(names=CASE_FILES):
    """The cases of `names` that record outputs (files may also hold failing steps)."""
    return [c for n in names for c in load_cases(n) if "expected" in c or "expected_groups" in c]


def error_cases(names=CASE_FILES + ERROR_FILES):
    return [c for n in names for c in load_cases(n) if "error" in c]


def case_id(case):
    return case["name"]


def config_kwargs(case):
    """MetadataBuilder keyword arguments of a case (tools/case_file.cpp parse_config): the
    config keys are the constructor's keywords."""
    kw = {k: v for k, v in case["config"].items() if v is not None}
    # vLLM's prefill_checkpoint_alignment = None: no checkpoints.
    if ("prefill_checkpoint_alignment" in case["config"]
            and kw.get("prefill_checkpoint_alignment") is None):
        kw["num_prefill_checkpoint_blocks"] = 0
    kw["chunk_metadata"] = case["builder"] == "gdn"
    # Case configs carry a token capacity only where the builder reads it (Inkling), else any
    # capacity >= the step's tokens (tools/case_file.cpp).
    kw.setdefault("max_num_batched_tokens", max(case["step"]["num_actual_tokens"], 1))
    return kw


def tables(case):
    """The block table of every group (one for single-group cases)."""
    step = case["step"]
    return list(step["groups"]) if "groups" in step else [step["block_table"]]


def expected_groups(case):
    return list(case["expected_groups"]) if "expected_groups" in case else [case["expected"]]


def step_kwargs(case, host, device, host_bool):
    """build() keyword arguments (without the block table). `host(list)` / `device(list)`
    make int32 arrays in host / target memory, `host_bool(list)` a bool host array."""
    s = case["step"]
    kw = dict(
        query_start_loc_cpu=host(s["query_start_loc"]),
        query_start_loc=device(s["query_start_loc"]),
        seq_lens=device(s["seq_lens"]),
        seq_lens_cpu_upper_bound=host(s["seq_lens_cpu_upper_bound"]),
        num_actual_tokens=s["num_actual_tokens"],
    )
    if s.get("is_prefilling") is not None:
        kw["is_prefilling"] = host_bool(s["is_prefilling"])
    if s.get("num_decode_draft_tokens_cpu") is not None:
        kw["num_decode_draft_tokens_cpu"] = host(s["num_decode_draft_tokens_cpu"])
    if s.get("num_accepted_tokens") is not None:
        kw["num_accepted_tokens"] = device(s["num_accepted_tokens"])
    return kw


def run_case(case, host, device, host_bool, table, independent=False, **builder_kwargs):
    """Runs a case through the Python API; returns (metadata list, builders).
    `table(list of rows)` makes a block table in target memory."""
    cfg = config_kwargs(case)
    kw = step_kwargs(case, host, device, host_bool)
    capture = case.get("mode", "build") == "capture"
    tabs = [table(t) for t in tables(case)]
    out, builders = [], []
    if independent or len(tabs) == 1:
        for t in tabs:
            b = linmeta.MetadataBuilder(case["builder"], **cfg, **builder_kwargs)
            fn = b.build_for_cudagraph_capture if capture else b.build
            out.append(fn(block_table=t, **kw))
            builders.append(b)
    else:
        b = linmeta.MetadataBuilder(case["builder"], **cfg, num_groups=len(tabs), **builder_kwargs)
        fn = b.build_groups_for_cudagraph_capture if capture else b.build_groups
        out.extend(fn(block_tables=tabs, **kw))
        builders.append(b)
    return out, builders


def _value_json(v, to_numpy):
    """An output value as the case files record it: arrays as nested lists (their dtype beside
    them), host lists as lists, composites as objects, nums_dict keyed by str(BLOCK_M)."""
    if v is None or isinstance(v, (bool, int, list)):
        return v
    if isinstance(v, dict):
        return _members_json(v, to_numpy)
    if hasattr(v, "__dict__") and not _is_input_array(v):  # a composite
        return _members_json(vars(v), to_numpy)
    return to_numpy(v).tolist()


def _is_input_array(v):
    """An array: a DLPack producer, or one of the DLPack C exchange API only
    (exchange_producer.py)."""
    return hasattr(v, "__dlpack__") or hasattr(type(v), "__dlpack_c_exchange_api__")


def _members_json(members, to_numpy):
    j = {}
    for name, v in members.items():
        name = str(name)
        j[name] = _value_json(v, to_numpy)
        if _is_input_array(v):  # an array (numpy, torch, a DLPack view): its dtype
            a = to_numpy(v)
            j[name + "__dtype"] = str(a.dtype)
            if a.ndim == 2 and a.shape[0] == 0:
                j[name + "__shape"] = [0, a.shape[1]]
    return j


def to_json(md, kind, to_numpy):
    """The metadata as tools/case_file.cpp to_json() writes it: every top-level field of the
    output table that kind `kind` fills. `to_numpy(x)` turns an output array into numpy."""
    names = [n for n, _dt, _scope, kinds in linmeta.OUTPUT_FIELDS if kind in kinds and "." not in n]
    # The block table Inkling's metadata and a KDA align commit carry is the caller's (not
    # recorded).
    j = _members_json({n: getattr(md, n) for n in names}, to_numpy)
    align = (j.get("recoverssm_commit") or {}).get("align")
    for holder in (j, align or {}):
        holder.pop("block_table", None)
        holder.pop("block_table__dtype", None)
    return j


def conv1d_entry(got):
    """The seed format's `conv1d` entry of a to_json() result (tools/case_file.cpp)."""
    nd = got.get("nums_dict")
    if nd is None:
        return None
    d = nd[str(linmeta.CONV_BLOCK)]
    tot = d["tot"]
    bp, off = got["batch_ptr"], got["token_chunk_offset_ptr"]
    pad_ok = len(bp) >= 2 * max(1024, tot) and len(off) == len(bp)
    pad_ok = pad_ok and all(x == linmeta.PAD_SLOT_ID for x in bp[tot:] + off[tot:])
    return {
        "nums": d["nums"],
        "tot": tot,
        "batch_ptr": d["mlist"],
        "token_chunk_offset_ptr": d["offsetlist"],
        "capacity_padding_ok": pad_ok,
    }


def _same_recorded(expected, got):
    """Composites: the members a case records must match; others are not compared."""
    if not isinstance(expected, dict) or not isinstance(got, dict):
        return expected == got
    return all(k in got and _same_recorded(v, got[k]) for k, v in expected.items())


def mismatches(expected, got):
    """Every recorded field that differs, and every unrecorded field that is not None
    (tools/case_file.cpp compare)."""
    out = []
    for k, v in expected.items():
        g = conv1d_entry(got) if k == "conv1d" else got.get(k, "<missing>")
        if _same_recorded(v, g):
            continue
        if k == "flashinfer_prefill_seq_order" and _seq_order_ok(v, g, expected):
            continue
        out.append((k, v, g))
    unrecorded_ok = ("nums_dict", "batch_ptr", "token_chunk_offset_ptr", "spec_sequence_masks_cpu")
    for k, g in got.items():
        if k in expected or k in unrecorded_ok or k.endswith(("__dtype", "__shape")):
            continue
        if g is not None and not (k == "replayssm_align_block_size" and g == 0):  # an int: 0 unset
            out.append((k, None, g))
    return out


def _seq_order_ok(expected, got, rec):
    """Prefill orders agree up to ties (vLLM sorts with an unstable argsort): a permutation
    with the same sequence length at every place, lengths indexed by sequence number."""
    qsl = rec.get("flashinfer_prefill_query_start_loc")
    n = len(expected)
    if not isinstance(got, list) or len(got) != n or not qsl or len(qsl) != n + 1:
        return False
    if sorted(got) != list(range(n)) or sorted(expected) != list(range(n)):
        return False
    length = [qsl[i + 1] - qsl[i] for i in range(n)]
    return all(length[g] == length[e] for g, e in zip(got, expected))


def assert_matches(case, results, to_numpy):
    exp = expected_groups(case)
    assert len(results) == len(exp)
    for g, (e, md) in enumerate(zip(exp, results)):
        bad = mismatches(e, to_json(md, case["builder"], to_numpy))
        assert not bad, f"{case['name']} group {g}: " + "; ".join(
            f"{k}: expected {_short(v)}, got {_short(w)}" for k, v, w in bad[:4]
        )


def _short(v, limit=300):
    s = repr(v)
    return s if len(s) <= limit else s[:limit] + f"... ({len(s)} chars)"


# --------------------------------------------------------------------------------------------
# vLLM metadata objects (linmeta.vllm's builders) in the vLLM 0.34 Mamba case format


def vllm_json(md, to_numpy, skip=()):
    """A vLLM metadata dataclass as the wheel harness records it (tests/vllm/wheel_mamba.py
    serialise): every field but `skip`, arrays as nested lists with "<field>__dtype" beside
    them and "<field>__shape" for empty arrays of 2+ dimensions, 0-d arrays as scalars,
    nested dataclasses and dicts (nums_dict, keys as strings) as objects."""
    import dataclasses

    return _vllm_object({f.name: getattr(md, f.name) for f in dataclasses.fields(md)
                         if f.name not in skip}, to_numpy)


def _vllm_object(items, to_numpy):
    out = {}
    for name, v in items.items():
        out[name] = _vllm_value(v, to_numpy)
        if _is_array(v):
            a = to_numpy(v)
            out[name + "__dtype"] = str(a.dtype)
            if a.size == 0 and a.ndim >= 2:
                out[name + "__shape"] = list(a.shape)
    return out


def _is_array(v):
    return hasattr(v, "__dlpack__") or hasattr(v, "__array_interface__")


def _vllm_value(v, to_numpy):
    import dataclasses

    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if _is_array(v):
        return to_numpy(v).tolist()
    if isinstance(v, (list, tuple)):
        return [_vllm_value(x, to_numpy) for x in v]
    if isinstance(v, dict):
        return _vllm_object({str(k): x for k, x in v.items()}, to_numpy)
    if dataclasses.is_dataclass(v):
        return _vllm_object({f.name: getattr(v, f.name) for f in dataclasses.fields(v)},
                            to_numpy)
    raise TypeError(f"cannot serialise {type(v).__name__}")


def strict_mismatches(expected, got, path=""):
    """Every difference between two JSON values, strictly: the same keys in objects, the same
    lengths, and the same JSON types (a bool is not an int, an int not a float)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out = []
        for k in expected.keys() | got.keys():
            if k not in got:
                out.append((f"{path}{k}", expected[k], "<missing>"))
            elif k not in expected:
                out.append((f"{path}{k}", "<not recorded>", got[k]))
            else:
                out += strict_mismatches(expected[k], got[k], f"{path}{k}.")
        return out
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        out = []
        for i, (e, g) in enumerate(zip(expected, got)):
            out += strict_mismatches(e, g, f"{path.rstrip('.')}[{i}].")
        return out[:1]  # the first element that differs is enough
    if type(expected) is not type(got) or expected != got:
        return [(path.rstrip(".") or "<value>", expected, got)]
    return []


def assert_vllm_matches(case, results, to_numpy, skip=()):
    """Each group's vLLM metadata object recorded exactly as `case` records it."""
    exp = expected_groups(case)
    assert len(results) == len(exp), (case["name"], len(results), len(exp))
    for g, (e, md) in enumerate(zip(exp, results)):
        bad = strict_mismatches(e, vllm_json(md, to_numpy, skip))
        bad.sort(key=lambda b: b[0])
        assert not bad, f"{case['name']} group {g}: " + "; ".join(
            f"{k}: expected {_short(v)}, got {_short(w)}" for k, v, w in bad[:4]
        )
