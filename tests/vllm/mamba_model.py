"""A torch-free model of vLLM 0.34.0's Mamba-family metadata builders (Mamba2, Mamba1, ShortConv,
linear attention) as a case file sees them: every rule written out once, with the wheel's
file:line, and checked against the real wheel's answers.

  mamba_model.py check FILLED.jsonl...   recompute "expected" / "expected_groups" (or the
                                         raised exception class) of every Mamba case and
                                         compare; exit 1 on a difference

It is the executable form of the rule list a reimplementation (linmeta's C++) must follow;
wheel_mamba.py is the harness that runs the wheel itself. Paths are relative to
site-packages/vllm/ of vllm 0.34.0:
  mamba_attn.py    v1/attention/backends/mamba_attn.py (BaseMambaAttentionMetadataBuilder)
  mamba2_attn.py   v1/attention/backends/mamba2_attn.py
  mamba1_attn.py, short_conv_attn.py, linear_attn.py (same folder)
  utils.py         v1/attention/backends/utils.py
  checkpoint.py    model_executor/layers/mamba/checkpoint.py
  kv_cache_interface.py  v1/kv_cache_interface.py
"""

from __future__ import annotations

import json
import sys

NULL_BLOCK_ID = 0  # utils.py NULL_BLOCK_ID
PAD_SLOT_ID = -1  # utils.py PAD_SLOT_ID
CONV_BLOCK_M = 8  # utils.py:1131


class Raised(Exception):
    """The wheel raises here: ``kind`` is the exception class name."""

    def __init__(self, kind: str, why: str):
        super().__init__(f"{kind}: {why}")
        self.kind = kind


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def put(out: dict, name: str, data, dtype: str, shape: list[int] | None = None) -> None:
    """A tensor field in the case format: list, <name>__dtype, <name>__shape if empty and 2-D+."""
    out[name] = data
    out[f"{name}__dtype"] = dtype
    if shape is not None and len(shape) >= 2 and 0 in shape:
        out[f"{name}__shape"] = shape


# ----------------------------------------------------------------------------- shared pieces


def graph_limit(cfg: dict) -> int:
    """decode_cudagraph_max_bs = min(max_num_seqs, max_cudagraph_capture_size) (mamba_attn.py:115-120;
    not multiplied by 1 + k as GDN's is)."""
    d = cfg["max_num_seqs"]
    if cfg["max_cudagraph_capture_size"] is not None:
        d = min(d, cfg["max_cudagraph_capture_size"])
    return d


def state_gather(cfg: dict, table: list[list[int]], seq_lens: list[int]) -> list[list[int]]:
    """mamba_get_block_table_tensor (utils.py:1286-1345): "none" -> the block table itself (all
    its columns); "align" -> 1 + num_speculative_blocks columns from (seq_lens - 1) // block_size
    clamped at 0, read with the *device* seq_lens; a column past the row raises (torch.gather)."""
    if cfg["mamba_cache_mode"] == "none":
        return [list(r) for r in table]
    block, n_out = cfg["block_size"], 1 + cfg["num_speculative_blocks"]
    out = []
    for row, s in zip(table, seq_lens):
        start = max((s - 1) // block, 0)
        if start + n_out > len(row):
            raise Raised("RuntimeError", f"gather column {start + n_out - 1} of a {len(row)}-column row")
        out.append(row[start : start + n_out])
    return out


def split(q: list[int], num_tokens: int, threshold: int, prefilling: list[bool] | None,
          short_extends_as_decodes: bool) -> tuple[int, int, int, int]:
    """split_decodes_and_prefills (utils.py:922-993); returns (nd, np, ndt, npt). The decode rows
    are the rows before the first prefill row; the token counts include num_actual_tokens'
    padding (all-decode: ndt = num_actual_tokens; else npt = num_actual_tokens - qsl[nd])."""
    n = len(q)
    if max(q, default=0) <= threshold and short_extends_as_decodes:
        return n, 0, num_tokens, 0
    if q[0] > threshold:
        return 0, n, 0, num_tokens
    is_prefill = [x > threshold for x in q]
    if not short_extends_as_decodes:
        is_prefill = [a or b for a, b in zip(is_prefill, prefilling)]
    if not any(is_prefill):
        return n, 0, num_tokens, 0
    first = is_prefill.index(True)
    ndt = sum(q[:first])
    return first, n - first, ndt, num_tokens - ndt


def conv1d(qsl_p: list[int]) -> tuple[dict, list[int], list[int]]:
    """compute_causal_conv1d_metadata (utils.py:1122-1168) for BLOCK_M 8: nums (int32) =
    cdiv(query_len, 8) per prefill row, mlist (int64) = row index per program, offsetlist (int32)
    = program index within its row; batch_ptr / token_chunk_offset_ptr (int32) hold them in a
    buffer of 2 * max(1024, tot) entries padded with PAD_SLOT_ID (-1). nums_dict[8]["batch_ptr"]
    is the metadata's batch_ptr itself (same for token_chunk_offset_ptr)."""
    lens = [b - a for a, b in zip(qsl_p, qsl_p[1:])]
    nums = [cdiv(x, CONV_BLOCK_M) for x in lens]
    mlist = [i for i, m in enumerate(nums) for _ in range(m)]
    offsets = [j for m in nums for j in range(m)]
    size = 2 * max(1024, len(mlist))
    batch_ptr = mlist + [PAD_SLOT_ID] * (size - len(mlist))
    chunk_ptr = offsets + [PAD_SLOT_ID] * (size - len(offsets))
    entry: dict = {}
    put(entry, "nums", nums, "int32")
    entry["tot"] = sum(nums)
    put(entry, "mlist", mlist, "int64")
    entry["mlist_len"] = len(mlist)
    put(entry, "offsetlist", offsets, "int32")
    put(entry, "batch_ptr", batch_ptr, "int32")
    put(entry, "token_chunk_offset_ptr", chunk_ptr, "int32")
    return {str(CONV_BLOCK_M): entry}, batch_ptr, chunk_ptr


# ----------------------------------------------------------------------------- Mamba2 pieces


def checkpoint_position(num_tokens: int, grid: int) -> int:
    """get_mamba_prefill_checkpoint_position (kv_cache_interface.py:1203-1220), no EAGLE block
    drop, no hash look-ahead: the last grid boundary before the final token."""
    return max((num_tokens - 1) // grid * grid, 0)


def checkpoint_valid(start: int, end: int, position: int, grid: int, block: int,
                     alignment: int | None) -> bool:
    """is_mamba_prefill_checkpoint_valid (kv_cache_interface.py:1223-1244)."""
    if alignment is None:
        return False
    return (
        start % grid == 0
        and cdiv(end, block) - 2 > (start - 1) // block
        and start + grid <= position
        and start < position < end
        and (position - start) % alignment == 0
    )


def checkpoints(cfg: dict, rows: list[int], q: list[int], ub: list[int],
                table: list[list[int]]) -> dict | None:
    """MambaPrefillCheckpointBuilder.build (checkpoint.py:113-165) over the prefill rows, with
    seq_lens_cpu_upper_bound; None unless align mode, num_prefill_checkpoint_blocks > 0 and some
    row checkpoints. hash_block_size = cache_hit_alignment_tokens = block size here."""
    if cfg["mamba_cache_mode"] != "align" or not cfg["num_prefill_checkpoint_blocks"]:
        return None
    block = cfg["block_size"]
    alignment = cfg.get("prefill_checkpoint_alignment")
    offsets, cols = [], []
    for r in rows:
        start = ub[r] - q[r]
        pos = checkpoint_position(ub[r], block)
        ok = checkpoint_valid(start, ub[r], pos, block, block, alignment)
        offsets.append(pos - start if ok else 0)
        cols.append(cdiv(ub[r], block) - 2 if ok else -1)
    if not any(offsets):
        return None
    return {"offsets": offsets, "cols": cols, "rows": list(rows), "query_lens": [q[r] for r in rows]}


def checkpoint_state_indices(ck: dict, table: list[list[int]]) -> list[int]:
    """_gather_checkpoint_state_indices (checkpoint.py:66-71): torch.where(cols >= 0,
    table[rows, cols], NULL_BLOCK_ID); the gather runs for every row, so a declining row's
    column -1 reads the row's last entry (discarded) and a column past the row raises."""
    out = []
    for r, c in zip(ck["rows"], ck["cols"]):
        row = table[r]
        if c >= len(row) or c < -len(row):
            raise Raised("IndexError", f"checkpoint column {c} of a {len(row)}-column row")
        out.append(row[c] if c >= 0 else NULL_BLOCK_ID)
    return out


def checkpoint_meta(ck: dict, table: list[list[int]]) -> dict:
    out: dict = {}
    put(out, "checkpoint_offsets", ck["offsets"], "int32")
    put(out, "state_indices", checkpoint_state_indices(ck, table), "int32")
    out["offsets"] = ck["offsets"]
    out["query_lens"] = ck["query_lens"]
    put(out, "request_rows", ck["rows"], "int64")
    put(out, "block_cols", ck["cols"], "int64")
    return out


def chunks(chunk: int, computed: list[int], lens: list[int], ck_offsets: list[int] | None):
    """_compute_chunk_metadata (mamba_attn.py:235-308): per prefill row, split at the checkpoint
    (if any) into two segments, each chunked on the absolute chunk grid (a first partial chunk
    finishes a non-aligned start; zero-token segments add no chunk but still record
    len(chunks) - 1 as the row's last chunk, -1 if none yet)."""
    cu, seq_idx, last, ck_idx = [], [], [], [-1] * len(lens)
    pos = 0
    segments = []
    for i, (c, n) in enumerate(zip(computed, lens)):
        o = ck_offsets[i] if ck_offsets else 0
        if o:
            segments.append((i, c, o, True))
        segments.append((i, c + o, n - o, False))
    for i, c, n, is_ck in segments:
        if c % chunk != 0:
            seq_idx.append(i)
            cu.append(pos)
            take = min(cdiv(c, chunk) * chunk - c, n)
            pos += take
            n -= take
        for _ in range(cdiv(n, chunk)):
            seq_idx.append(i)
            cu.append(pos)
            take = min(chunk, n)
            pos += take
            n -= take
        if n != 0:
            raise Raised("AssertionError", "chunk split left tokens")
        if is_ck:
            ck_idx[i] = len(cu) - 1
        else:
            last.append(len(cu) - 1)
    cu.append(pos)
    return cu, seq_idx, last, ck_idx


# ----------------------------------------------------------------------------- builders


def base_metadata(builder: str, cfg: dict, step: dict, table: list[list[int]], accepted_kw,
                  drafts_kw) -> tuple[dict, dict]:
    """BaseMambaAttentionMetadataBuilder._compute_common_metadata (mamba_attn.py:388-570) and
    _update_metadata_for_cudagraph_capture (572-651). Returns (expected, facts for Mamba2)."""
    k = cfg["num_spec"]
    qsl, seq, ub = step["query_start_loc"], step["seq_lens"], step["seq_lens_cpu_upper_bound"]
    q = [b - a for a, b in zip(qsl, qsl[1:])]
    n, nat = len(seq), step["num_actual_tokens"]
    # mamba_attn.py:402-404 + _init_reorder_batch_threshold(1, k > 0) (mamba_attn.py:187,
    # backend.py:652-671): 1 + k when the accepted counts are passed, else 1.
    threshold = (1 + k) if accepted_kw is not None else 1
    if step["is_prefilling"] is None:
        raise Raised("AssertionError", "is_prefilling is None (mamba_attn.py:413)")
    prefilling = list(step["is_prefilling"])
    for i in range(n):  # mamba_attn.py:418-446: reclassified prefill rows, with prior state
        prior = ub[i] > q[i]
        to_decode = prefilling[i] and prior and q[i] == 1
        if drafts_kw is not None:
            to_decode |= prefilling[i] and prior and drafts_kw[i] >= 0 and q[i] == drafts_kw[i] + 1
        if to_decode:
            prefilling[i] = False
    nd, np_, ndt, npt = split(q, nat, threshold, prefilling, short_extends_as_decodes=False)

    gathered = state_gather(cfg, table, seq)
    width = len(gathered[0]) if gathered else 1 + k
    sid = [r[: 1 + k] for r in gathered[:nd]]
    sid_cols = min(width, 1 + k)
    sip = [r[0] for r in gathered[nd:]]

    qsl_d, acc = None, accepted_kw  # the caller's tensor, whole, unless sliced below
    if nd > 0 and k > 0:  # mamba_attn.py:485-494
        qsl_d = qsl[: nd + 1]
        acc = accepted_kw[:nd] if accepted_kw is not None else q[:nd]

    e: dict = {"num_prefills": np_, "num_prefill_tokens": npt, "num_decodes": nd,
               "num_decode_tokens": ndt, "num_reqs": n}
    facts = {"q": q, "nd": nd, "np": np_, "ndt": ndt, "first": n - np_}
    if np_ > 0:  # mamba_attn.py:496-517
        qsl_p = [x - ndt for x in qsl[-np_ - 1 :]]
        computed = [s - x for s, x in zip(seq, q)]  # device seq_lens (compute_num_computed_tokens)
        put(e, "has_initial_states_p", [c > 0 for c in computed[n - np_ :]], "bool")
        put(e, "query_start_loc_p", qsl_p, "int32")
        nums_dict, batch_ptr, chunk_ptr = conv1d(qsl_p)
    else:
        e["has_initial_states_p"] = None
        e["query_start_loc_p"] = None
        nums_dict = batch_ptr = chunk_ptr = None
    put(e, "state_indices_tensor_p", sip, "int32")

    # FULL-graph staging (mamba_attn.py:587-608): pure-decode batches of <= D decode rows are
    # copied into the builder's persistent buffers; rows [num_decodes, num_reqs) would be
    # NULL_BLOCK_ID / accepted 1, but without prefills num_decodes == num_reqs, so the values
    # are the gathered ones. The buffer has 1 + k columns.
    if np_ == 0 and nd <= graph_limit(cfg) and cfg["full_cuda_graph"]:
        if sid_cols != 1 + k:
            if sid_cols != 1:
                raise Raised("RuntimeError", "staging copy of a narrower state table")
            sid = [[r[0]] * (1 + k) for r in sid]
        sid_cols = 1 + k
        sid = sid + [[NULL_BLOCK_ID] * (1 + k) for _ in range(n - nd)]
        if k > 0 and acc is not None:
            qsl_d = qsl_d[: n + 1]
            acc = list(acc) + [1] * (n - nd)
    put(e, "state_indices_tensor_d", sid, "int32", [len(sid), sid_cols])
    if qsl_d is None:
        e["query_start_loc_d"] = None
    else:
        put(e, "query_start_loc_d", qsl_d, "int32")
    if acc is None:
        e["num_accepted_tokens"] = None
    else:
        put(e, "num_accepted_tokens", acc, "int32")
    put(e, "seq_lens", seq, "int32")
    e["cu_chunk_seqlen_p"] = None
    e["last_chunk_indices_p"] = None
    e["nums_dict"] = nums_dict
    if batch_ptr is None:
        e["batch_ptr"] = e["token_chunk_offset_ptr"] = None
    else:
        put(e, "batch_ptr", batch_ptr, "int32")
        put(e, "token_chunk_offset_ptr", chunk_ptr, "int32")
    return e, facts


def mamba2_metadata(cfg: dict, step: dict, table: list[list[int]], e: dict, facts: dict) -> dict:
    """Mamba2AttentionMetadataBuilder.build (mamba2_attn.py:161-228)."""
    e["prep_initial_states"] = False
    e["chunk_size"] = cfg["chunk_size"]
    e["seq_idx_p"] = None
    e["checkpoint_chunk_idx"] = None
    e["checkpoint_meta"] = None
    if facts["np"] == 0:
        return e
    q, first, n = facts["q"], facts["first"], len(facts["q"])
    ub = step["seq_lens_cpu_upper_bound"]
    qsl_p = [x - facts["ndt"] for x in step["query_start_loc"][-facts["np"] - 1 :]]
    lens = [b - a for a, b in zip(qsl_p, qsl_p[1:])]
    computed = [ub[first + i] - lens[i] for i in range(len(lens))]  # host upper bound (_prefill_cpu_metadata)
    e["prep_initial_states"] = any(c > 0 for c in computed)
    ck = checkpoints(cfg, list(range(first, n)), q, ub, table)
    if ck is not None:
        e["checkpoint_meta"] = checkpoint_meta(ck, table)
    cu, seq_idx, last, ck_idx = chunks(cfg["chunk_size"], computed, lens, ck["offsets"] if ck else None)
    put(e, "cu_chunk_seqlen_p", cu, "int32")
    put(e, "last_chunk_indices_p", last, "int32")
    put(e, "seq_idx_p", seq_idx, "int32")
    if any(i >= 0 for i in ck_idx):
        put(e, "checkpoint_chunk_idx", [max(i, 0) for i in ck_idx], "int64")
    return e


def linear_metadata(cfg: dict, step: dict, table: list[list[int]]) -> dict:
    """LinearAttentionMetadataBuilder.build (linear_attn.py:63-94): no spec kwargs, no
    is_prefilling, no staging; threshold 1 with short extends as decodes."""
    qsl, seq = step["query_start_loc"], step["seq_lens"]
    q = [b - a for a, b in zip(qsl, qsl[1:])]
    gathered = state_gather(cfg, table, seq)
    nd, np_, ndt, npt = split(q, step["num_actual_tokens"], 1, None, short_extends_as_decodes=True)
    e = {"num_prefills": np_, "num_prefill_tokens": npt, "num_decodes": nd, "num_decode_tokens": ndt}
    put(e, "query_start_loc", qsl, "int32")
    put(e, "seq_lens", seq, "int32")
    put(e, "state_indices_tensor", [r[0] for r in gathered], "int32")
    return e


def run(case: dict) -> tuple[dict, list[dict] | None]:
    builder, cfg, step, mode = case["builder"], case["config"], case["step"], case["mode"]
    k = cfg["num_spec"]
    tables = step.get("groups") or [step["block_table"]]
    q = [b - a for a, b in zip(step["query_start_loc"], step["query_start_loc"][1:])]
    if builder == "linear":  # build_for_cudagraph_capture is AttentionMetadataBuilder's: build()
        outs = [linear_metadata(cfg, step, t) for t in tables]
        return outs[0], (outs if "groups" in step else None)
    if mode == "capture":  # mamba_attn.py:191-213
        if not (max(q, default=0) <= 1 + k and len(q) <= graph_limit(cfg)):
            raise Raised("AssertionError", "capture batch over the graph limit")
        if max(q, default=0) != 1 + k:
            raise Raised("AssertionError", "capture batch not decode-only")
        accepted_kw, drafts_kw = (q if k > 0 else None), None
    else:
        accepted_kw, drafts_kw = step["num_accepted_tokens"], step["num_decode_draft_tokens_cpu"]
    if builder == "mamba1":  # Mamba1's build() drops the kwargs (mamba1_attn.py:38-45)
        accepted_kw = drafts_kw = None
    outs = []
    for t in tables:
        e, facts = base_metadata(builder, cfg, step, t, accepted_kw, drafts_kw)
        if builder == "mamba2":
            e = mamba2_metadata(cfg, step, t, e, facts)
        outs.append(e)
    return outs[0], (outs if "groups" in step else None)


def check(paths: list[str]) -> int:
    good = bad = 0
    for path in paths:
        for line in open(path):
            if not line.strip():
                continue
            case = json.loads(line)
            if case["builder"] not in ("mamba2", "mamba1", "short_conv", "linear"):
                continue
            try:
                expected, groups = run(case)
            except Raised as r:
                recorded = case.get("error", {}).get("type")
                if recorded == r.kind:
                    good += 1
                else:
                    bad += 1
                    print(f"DIFF {case['name']}: model raises {r}, wheel: {recorded or 'no error'}")
                continue
            if "error" in case:
                bad += 1
                print(f"DIFF {case['name']}: wheel raised {case['error']['type']}, the model did not")
                continue
            diff = first_difference(expected, case["expected"])
            if diff is None and groups is not None:
                diff = first_difference(groups, case["expected_groups"], "expected_groups")
            if diff:
                bad += 1
                print(f"DIFF {case['name']}: {diff}")
            else:
                good += 1
    print(f"{good} agree, {bad} differ")
    return 1 if bad else 0


def first_difference(a, b, path="expected"):
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [x for x in b if x not in a]:
            if key not in a or key not in b:
                return f"{path}.{key}: present on one side only"
            d = first_difference(a[key], b[key], f"{path}.{key}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    if a != b:
        return f"{path}: {json.dumps(a)[:160]} != {json.dumps(b)[:160]}"
    return None


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "check":
        print(__doc__)
        sys.exit(2)
    sys.exit(check(sys.argv[2:]))
