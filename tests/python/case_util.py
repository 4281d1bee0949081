"""Case files (SPEC §10) in Python: the same mapping of a JSON case onto a linmeta
build as tools/case_file.cpp, and the same comparison rules (conv1d arrays cut to
`tot` plus the capacity_padding_ok check, KDA commit / checkpoint objects)."""

import json
import os

import linmeta

HERE = os.path.dirname(os.path.abspath(__file__))
PUBLIC_CASES = os.path.join(HERE, "..", "data", "public.jsonl")


def load_cases(path=PUBLIC_CASES):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def case_id(case):
    return case["name"]


def builder_class(case):
    return linmeta.KdaMetadataBuilder if case["builder"] == "kda" else linmeta.GdnMetadataBuilder


def config_kwargs(case):
    """Builder keyword arguments of a case (tools/case_file.cpp parse_case)."""
    cf = case["config"]
    step = case["step"]
    return dict(
        num_spec=cf["num_spec"],
        max_num_seqs=cf["max_num_seqs"],
        # Case configs carry no token capacity: any capacity >= the step's tokens.
        max_num_batched_tokens=max(step["num_actual_tokens"], 1),
        full_cuda_graph=cf["full_cuda_graph"],
        max_cudagraph_capture_size=cf["max_cudagraph_capture_size"],
        mamba_cache_mode=cf["mamba_cache_mode"],
        block_size=cf["block_size"],
        num_speculative_blocks=cf["num_speculative_blocks"],
        chunk_metadata=case["builder"] == "gdn",
        use_recoverssm=cf.get("use_recoverssm", False),
        num_prefill_checkpoint_blocks=cf.get("num_prefill_checkpoint_blocks", 0),
        profile=cf.get("profile", "seed"),
        prefill_backend=cf.get("prefill_backend"),
    )


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
    if s["is_prefilling"] is not None:
        kw["is_prefilling"] = host_bool(s["is_prefilling"])
    if s["num_decode_draft_tokens_cpu"] is not None:
        kw["num_decode_draft_tokens_cpu"] = host(s["num_decode_draft_tokens_cpu"])
    if s["num_accepted_tokens"] is not None:
        kw["num_accepted_tokens"] = device(s["num_accepted_tokens"])
    return kw


def run_case(case, host, device, host_bool, table, independent=False, **builder_kwargs):
    """Runs a case through the Python API; returns (metadata list, builders).
    `table(list of rows)` makes a block table in target memory."""
    cls = builder_class(case)
    cfg = config_kwargs(case)
    kw = step_kwargs(case, host, device, host_bool)
    capture = case.get("mode", "build") == "capture"
    tabs = [table(t) for t in tables(case)]
    out, builders = [], []
    if independent or len(tabs) == 1:
        for t in tabs:
            b = cls(**cfg, **builder_kwargs)
            fn = b.build_for_cudagraph_capture if capture else b.build
            out.append(fn(block_table=t, **kw))
            builders.append(b)
    else:
        b = cls(**cfg, num_groups=len(tabs), **builder_kwargs)
        fn = b.build_groups_for_cudagraph_capture if capture else b.build_groups
        out.extend(fn(block_tables=tabs, **kw))
        builders.append(b)
    return out, builders


def _array_json(a, to_numpy):
    if a is None:
        return None
    return to_numpy(a).tolist()


def to_json(md, kind, to_numpy):
    """The metadata with the case-file field names (tools/case_file.cpp to_json).
    `to_numpy(x)` turns an output array into a host numpy array."""
    j = {name: getattr(md, name) for name in linmeta.COUNT_FIELDS}
    # Every array field but the conv1d pair, which "conv1d" below covers.
    conv = ("batch_ptr", "token_chunk_offset_ptr")
    for name in (f for f in linmeta.ARRAY_FIELDS if f not in conv):
        j[name] = _array_json(getattr(md, name), to_numpy)
    j["uniform_spec_sequence_length"] = md.uniform_spec_sequence_length
    if md.nums_dict is None:
        assert md.batch_ptr is None and md.token_chunk_offset_ptr is None
        j["conv1d"] = None
    else:
        d = md.nums_dict[linmeta.CONV_BLOCK]
        tot = d["tot"]
        assert d["mlist_len"] == tot
        bp = to_numpy(md.batch_ptr)
        off = to_numpy(md.token_chunk_offset_ptr)
        pad_ok = len(bp) >= 2 * max(1024, tot) and len(off) == len(bp)
        pad_ok = pad_ok and bool((bp[tot:] == -1).all()) and bool((off[tot:] == -1).all())
        # vLLM's nums_dict views equal the prefixes of the program arrays.
        assert to_numpy(d["mlist"]).tolist() == bp[:tot].tolist()
        assert to_numpy(d["offsetlist"]).tolist() == off[:tot].tolist()
        j["conv1d"] = {
            "nums": to_numpy(d["nums"]).tolist(),
            "tot": tot,
            "batch_ptr": bp[:tot].tolist(),
            "token_chunk_offset_ptr": off[:tot].tolist(),
            "capacity_padding_ok": pad_ok,
        }
    if kind == "kda":
        rc = md.recoverssm_commit
        if rc is None:
            j["recoverssm_commit"] = None
        else:
            align = None
            if rc.align is not None:
                align = {
                    "num_computed_tokens": _array_json(rc.align.num_computed_tokens, to_numpy),
                    "block_size": rc.align.block_size,
                }
            j["recoverssm_commit"] = {
                "state_indices": _array_json(rc.state_indices, to_numpy),
                "query_start_loc": _array_json(rc.query_start_loc, to_numpy),
                "request_indices": _array_json(rc.request_indices, to_numpy),
                "align": align,
            }
        cp = md.checkpoint
        j["checkpoint"] = (
            None
            if cp is None
            else {
                "checkpoint_offsets": _array_json(cp.checkpoint_offsets, to_numpy),
                "state_indices": _array_json(cp.state_indices, to_numpy),
            }
        )
    return j


def mismatches(expected, got):
    """Every expected field that differs (tools/case_file.cpp compare)."""
    return [
        (k, v, got.get(k, "<missing>"))
        for k, v in expected.items()
        if got.get(k, "<missing>") != v
    ]


def assert_matches(case, results, kind, to_numpy):
    exp = expected_groups(case)
    assert len(results) == len(exp)
    for g, (e, md) in enumerate(zip(exp, results)):
        bad = mismatches(e, to_json(md, kind, to_numpy))
        assert not bad, f"{case['name']} group {g}: " + "; ".join(
            f"{k}: expected {v!r}, got {w!r}" for k, v, w in bad
        )
