"""Random scheduler steps for vLLM 0.34's Mamba-family builders, as case-file JSON lines without
"expected" (docs/case-format.md).
wheel_cases.py fill fills them from the real wheel.

  mamba_steps.py --builder mamba2|mamba1|short_conv|linear|bailing_linear|ple_short_conv|inkling
                 --count N [--seed S]
                 [--groups-percent P] [--zero-drafts-percent Z]
                 [--replayssm]
  mamba_steps.py --edges      a fixed list of hand-made steps at the builders' edges (none an
                              MRV2 step; each probes one rule of mamba_model.py)

The C++ step generator (tools/common/random_step.hpp, linmeta-stepgen) knows only gdn/kda;
this is its distribution carried over to the Mamba family, with the steps laid out as model
runner V2 lays them out for a Mamba hybrid model:

* configuration: k = num_speculative_tokens (0 in about a third of the steps, else 1..7;
  linear attention mostly 0), ``num_speculative_blocks = k``, max_num_seqs 4..256, FULL graphs
  in 60%, a resolved ``max_cudagraph_capture_size`` (vLLM's default-like
  ``min(512, 2 * max_num_seqs * (1 + k))`` or a listed size), cache mode none | align, block
  sizes 16 / 64 / 256 / 528; mamba2: chunk size 64 / 128 / 256 and, in 70%, the real Mamba2
  layer's checkpoint declaration (1 block, alignment 1), else vLLM's default (0, None);
* rows (``Role``): decodes, spec decodes (drafts 1..k, query = drafts + 1), prefill chunks
  (fresh or resumed, often on a block boundary so that align-mode checkpoints are valid; long
  ones run over many Mamba2 chunks), one-token prefill chunks with and without prior state,
  "padded prompt tails" (still prefilling, prior state, drafts >= 0 and query = drafts + 1:
  vLLM reclassifies both kinds with prior state as decodes, mamba_attn.py:418-446), short
  extends, resumed requests recomputing while not prefilling, zero-length padding rows last;
* order: usually MRV2's ``sort_batch_req_ids`` (model_runner.py:2579: rows with drafts first,
  then query == 1 + k, then ascending query length), else the C++ generator's layout (decode
  rows first, then prefills in scheduling order);
* host arrays as MRV2's ``MambaHybridModelState.prepare_attn`` makes them
  (mamba_hybrid.py:282-321): with k > 0 ``num_accepted_tokens`` (the previous step's count,
  1 for new/prefilling/padding rows) and ``num_decode_draft_tokens_cpu`` (drafts for rows not
  prefilling with 0 < query <= k + 1, else -1), both None when k == 0; a few steps pass
  accepted counts without drafts; async spec decode: the device ``seq_lens`` of decode rows
  trails ``seq_lens_cpu_upper_bound`` by up to k rejected drafts (equal everywhere else);
* token padding (``num_actual_tokens`` past the last query), 2-4 KV-cache groups in P%;
* block tables: none mode 1 + k columns; align mode wide enough for the aligned gather
  (``(seq_len - 1) // block_size + k``) and the checkpoint column, plus slack; either dense
  random block ids or sparse as the runner leaves them (only the live blocks non-zero);
* capture (FULL graphs, 10%): MRV2's dummy batch (``InputBatch.make_dummy``): every row
  1 + k tokens, seq_len == query_len, nothing prefilling, no drafts / accepted counts, zeroed
  or random tables; a few capture batches exceed the graph limit or are not uniform (vLLM
  asserts, mamba_attn.py:199-207).

Inkling's short-conv builder (``inkling``) takes the same steps: cache mode none (its cache is a
sliding-window KV cache, no Mamba state), no speculative blocks, ``max_num_batched_tokens`` 2048 or
8192 (the size of its buffers: longer steps are rejected), no graph limit at capture (its
capture build is a plain build), and more token padding (its fields cover the padded tokens).

--replayssm (the Mamba base builders: mamba2, mamba1, short_conv, ple_short_conv): every
configuration has ``use_replayssm`` (ReplaySSM's Triton path, cache_config.use_replayssm) and
k = 0 (vLLM 0.34 runs ReplaySSM's speculative decoding on FlashInfer only); the rest as above,
from its own stream (seed ``mamba_steps/B/S/replayssm``).

Reproducible: the same arguments print the same lines (Python's random.Random(seed)).
"""

from __future__ import annotations

import argparse
import json
import random
import sys

BUILDERS = ("mamba2", "mamba1", "short_conv", "linear", "bailing_linear", "ple_short_conv", "inkling")
LINEAR = ("linear", "bailing_linear", "inkling")
REPLAYSSM = ("mamba2", "mamba1", "short_conv", "ple_short_conv")  # BaseMambaAttentionMetadataBuilder  # no graph limit at capture, no is_prefilling rules
BLOCK_SIZES = (16, 64, 256, 528)
CHUNK_SIZES = (64, 128, 256)
CAPTURE_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128, 192, 256, 320, 384, 512)
MAX_ALIGN_CONTEXT = {16: 1200, 64: 4000, 256: 12000, 528: 20000}  # keeps align tables < ~250 cols
MAX_BLOCK_ID = 1 << 20

# Row roles.
DECODE = "decode"  # not prefilling, 1 token (k > 0: a spec row that drafted 0 tokens)
SPEC = "spec"  # not prefilling, drafts 1..k, query = drafts + 1
PREFILL = "prefill"  # prefilling chunk, 2+ tokens (or 1 on a fresh prompt)
ONE_TOKEN = "one_token"  # prefilling, 1 token, with prior state -> a decode in vLLM
FIRST_ONE = "first_one"  # prefilling, 1 token, fresh prompt -> stays a prefill
PROMPT_TAIL = "prompt_tail"  # prefilling, prior state, drafts d >= 0, query d + 1 -> a decode
SHORT_EXTEND = "short_extend"  # prefilling, 2..k+1 tokens, no drafts -> a prefill
RESUMED = "resumed"  # not prefilling, query > k + 1 -> a prefill by length
PAD = "pad"  # zero-length padding row


def random_config(rng: random.Random, builder: str, replayssm: bool = False) -> dict:
    if replayssm:
        k = 0
    elif builder == "linear":
        k = 0 if rng.random() < 0.85 else rng.randint(1, 7)
    else:
        k = 0 if rng.random() < 0.35 else rng.randint(1, 7)
    max_num_seqs = rng.choice((4, 8, 16, 32, 64, 128, 256))
    if rng.random() < 0.5:
        capture = min(512, 2 * max_num_seqs * (1 + k))
    else:
        capture = rng.choice(CAPTURE_SIZES)
    c = {
        "num_spec": k,
        "max_num_seqs": max_num_seqs,
        "full_cuda_graph": rng.random() < 0.6,
        "max_cudagraph_capture_size": capture,
        "mamba_cache_mode": rng.choice(("none", "align")),
        "block_size": rng.choice(BLOCK_SIZES),
        "num_speculative_blocks": k,
        "use_recoverssm": False,
        "num_prefill_checkpoint_blocks": 0,
    }
    if replayssm:
        c["use_replayssm"] = True
    if builder == "mamba2":
        declares = rng.random() < 0.7
        c["num_prefill_checkpoint_blocks"] = 1 if declares else 0
        c["prefill_checkpoint_alignment"] = 1 if declares else None
        c["chunk_size"] = rng.choice(CHUNK_SIZES)
    if builder == "ple_short_conv":  # its builder has checkpoints; no layer declares them yet
        declares = rng.random() < 0.5
        c["num_prefill_checkpoint_blocks"] = 1 if declares else 0
        c["prefill_checkpoint_alignment"] = rng.choice((1, 16, c["block_size"])) if declares else None
    if builder == "inkling":  # a sliding-window KV cache of kernel-size blocks, no Mamba state
        c["mamba_cache_mode"] = "none"
        c["num_speculative_blocks"] = 0
        c["block_size"] = rng.choice((2, 4, 16))
        c["max_num_batched_tokens"] = rng.choice((2048, 8192))  # its buffers' size
    c["profile"] = "vllm-0.34"
    return c


def graph_limit(c: dict) -> int:
    """BaseMambaAttentionMetadataBuilder.decode_cudagraph_max_bs (mamba_attn.py:115-120)."""
    return min(c["max_num_seqs"], c["max_cudagraph_capture_size"])


def _prefill_len(rng: random.Random, long_bias: float) -> int:
    x = rng.random()
    if x < long_bias:
        return rng.randint(1025, 6000)
    if x < long_bias + 0.3:
        return rng.randint(65, 1024)
    return rng.randint(2, 64)


def _computed(rng: random.Random, c: dict, aligned_start: bool) -> int:
    """Tokens already computed (> 0) for a row with prior state."""
    block = c["block_size"]
    limit = MAX_ALIGN_CONTEXT[block] if c["mamba_cache_mode"] == "align" else 250_000
    if aligned_start:
        return block * rng.randint(1, max(1, min(8, limit // block)))
    x = rng.random()
    hi = 64 if x < 0.3 else 2000 if x < 0.7 else limit
    return rng.randint(1, min(hi, limit))


def _roles(rng: random.Random, c: dict, n: int) -> list[str]:
    k = c["num_spec"]
    shape = rng.choices(
        ("decode", "spec", "prefill", "mixed", "edge"), weights=(20, 15 if k else 0, 20, 30, 15)
    )[0]
    roles = []
    for _ in range(n):
        if shape == "decode":
            r = DECODE
        elif shape == "spec":
            r = SPEC if rng.random() < 0.85 else DECODE
        elif shape == "prefill":
            r = PREFILL if rng.random() < 0.9 else rng.choice((ONE_TOKEN, FIRST_ONE))
        elif shape == "mixed":
            r = rng.choice((DECODE, SPEC, PREFILL) if k else (DECODE, PREFILL, PREFILL))
        else:
            edge = [ONE_TOKEN, FIRST_ONE, RESUMED, DECODE, PREFILL]
            if k:
                edge += [PROMPT_TAIL, PROMPT_TAIL, SHORT_EXTEND, SPEC]
            r = rng.choice(edge)
        if r == SPEC and not k:
            r = DECODE
        if r == SHORT_EXTEND and k < 1:
            r = PREFILL
        roles.append(r)
    return roles


def _mrv2_order(rows: list[dict], k: int) -> list[dict]:
    """model_runner.py:2579 sort_batch_req_ids: key (no drafts, query != 1 + k, query); stable."""
    return sorted(rows, key=lambda r: (not r["draft_list"], r["q"] != 1 + k, r["q"]))


def _cpp_order(rows: list[dict]) -> list[dict]:
    """random_step.hpp's layout: every decode-like row first (scheduling order), then the rest."""
    first = [r for r in rows if r["role"] in (DECODE, SPEC, ONE_TOKEN, PROMPT_TAIL)]
    return first + [r for r in rows if r["role"] not in (DECODE, SPEC, ONE_TOKEN, PROMPT_TAIL)]


def _tables(rng: random.Random, c: dict, seq_lens: list[int], seq_ub: list[int], pads: list[bool],
            groups: int) -> list[list[list[int]]]:
    k, block = c["num_spec"], c["block_size"]
    n = len(seq_lens)
    if c["mamba_cache_mode"] == "none":
        width = 1 + c["num_speculative_blocks"]
        dense = True
    else:
        need = 1 + k
        for s, u in zip(seq_lens, seq_ub):
            for x in (s, u):
                need = max(need, (max(x, 1) - 1) // block + 1 + c["num_speculative_blocks"])
                need = max(need, -(-x // block))
        width = need + (rng.randint(0, 3) if rng.random() < 0.7 else rng.randint(4, 24))
        dense = rng.random() < 0.5
    zero_pads = rng.random() < 0.5
    out = []
    for _ in range(groups):
        table = []
        for i in range(n):
            if pads[i] and zero_pads:
                table.append([0] * width)
                continue
            if dense:
                table.append([rng.randint(1, MAX_BLOCK_ID) for _ in range(width)])
                continue
            # As the runner leaves an align-mode row: earlier states nulled, the running
            # state's block, the blocks this step reaches, its spec blocks; the rest 0.
            row = [0] * width
            s = seq_lens[i]
            lo = max(0, (max(s, 1) - 1) // block - 1)
            hi = min(width, -(-max(seq_ub[i], 1) // block) + c["num_speculative_blocks"] + 1)
            for col in range(lo, hi):
                row[col] = rng.randint(1, MAX_BLOCK_ID)
            table.append(row)
        out.append(table)
    return out


def _capture_step(rng: random.Random, c: dict, builder: str) -> dict:
    """MRV2's dummy uniform-decode batch for a FULL graph (input_batch.py: make_dummy)."""
    k = c["num_spec"]
    limit = graph_limit(c)
    fits = max(1, min(c["max_num_seqs"], c["max_cudagraph_capture_size"] // (1 + k)))
    x = rng.random()
    # Over the graph limit: the Mamba builders assert; linear attention has no limit, and no
    # batch has more rows than the scheduler's max_num_seqs.
    if x < 0.04 and (builder not in LINEAR or limit < c["max_num_seqs"]):
        n = rng.randint(limit + 1, limit + 8)
        if builder in LINEAR:
            n = min(n, c["max_num_seqs"])
    else:
        n = rng.randint(1, min(fits, limit))
    q = [1 + k] * n
    if x > 0.97 and n > 1:  # not uniform (vLLM asserts max_query_len == 1 + k only)
        q = [rng.randint(0, 1 + k) for _ in range(n)]
        q[0] = rng.randint(0, k) if k else 0
    seq = list(q)
    qsl = [0]
    for v in q:
        qsl.append(qsl[-1] + v)
    tokens = qsl[-1] + (rng.randint(1, 64) if rng.random() < 0.1 else 0)
    groups = rng.randint(2, 4) if rng.random() < 0.15 else 1
    if rng.random() < 0.5:
        width = 1 + k if c["mamba_cache_mode"] == "none" else 1 + k + rng.randint(0, 3)
        tables = [[[0] * width for _ in range(n)] for _ in range(groups)]
    else:
        tables = _tables(rng, c, seq, seq, [False] * n, groups)
    return {
        "query_start_loc": qsl,
        "seq_lens": seq,
        "seq_lens_cpu_upper_bound": seq,
        "is_prefilling": [False] * n,
        "num_actual_tokens": tokens,
        "tables": tables,
        "num_decode_draft_tokens_cpu": None,
        "num_accepted_tokens": None,
    }


def _token_padding(rng: random.Random, builder: str) -> int:
    """Padded tokens past the last query (Inkling's fields cover them: more, and longer)."""
    if builder == "inkling" and rng.random() < 0.5:
        return rng.randint(1, 16) if rng.random() < 0.7 else rng.randint(17, 600)
    return rng.randint(1, 16) if rng.random() < 0.3 else 0


def random_step(rng: random.Random, c: dict, builder: str, groups: int, zero_drafts: float) -> dict:
    k = c["num_spec"]
    block = c["block_size"]
    align = c["mamba_cache_mode"] == "align"
    max_rows = c["max_num_seqs"]
    n = rng.randint(1, min(max_rows, 16)) if rng.random() < 0.7 else rng.randint(1, max_rows)
    pads = rng.randint(0, min(n - 1, 8)) if rng.random() < 0.4 else 0
    roles = _roles(rng, c, n - pads)
    no_drafts = zero_drafts > 0 and rng.random() < zero_drafts
    async_spec = k > 0 and rng.random() < 0.3
    budget = rng.choice((512, 2048, 8192, 16384))
    long_bias = 0.25 if rng.random() < 0.4 else 0.05
    checkpoint_bias = 0.6 if (builder == "mamba2" and align) else 0.4

    rows = []
    for role in roles:
        r = {"role": role, "draft_list": False}
        if role in (DECODE, SPEC):
            d = 0 if (role == DECODE or no_drafts) else rng.randint(1, k)
            r.update(q=d + 1, prefilling=False, drafts=d, computed=_computed(rng, c, False))
            r["draft_list"] = d > 0
        elif role == PREFILL:
            fresh = rng.random() < 0.45
            q = _prefill_len(rng, long_bias)
            if align:  # keeps align-mode tables narrow enough for case files
                q = min(q, 200 * block)
            computed = 0 if fresh else _computed(rng, c, rng.random() < checkpoint_bias)
            r.update(q=q, prefilling=True, drafts=-1, computed=computed)
        elif role == ONE_TOKEN:
            r.update(q=1, prefilling=True, drafts=-1, computed=_computed(rng, c, False))
        elif role == FIRST_ONE:
            r.update(q=1, prefilling=True, drafts=-1, computed=0)
        elif role == PROMPT_TAIL:
            d = 0 if no_drafts else rng.randint(0, k)
            r.update(q=d + 1, prefilling=True, drafts=d, computed=_computed(rng, c, False))
            r["draft_list"] = d > 0
        elif role == SHORT_EXTEND:
            r.update(q=rng.randint(2, k + 1), prefilling=True, drafts=-1,
                     computed=_computed(rng, c, False))
        elif role == RESUMED:
            r.update(q=rng.randint(k + 2, k + 200), prefilling=False, drafts=-1,
                     computed=_computed(rng, c, False))
        rows.append(r)

    # The token budget: fixed rows first, then prefills shrink into what is left.
    fixed = sum(r["q"] for r in rows if r["role"] != PREFILL)
    left = max(budget - fixed, 0)
    for r in rows:
        if r["role"] == PREFILL:
            r["q"] = max(1 if r["computed"] == 0 else 2, min(r["q"], left))
            left = max(left - r["q"], 0)
    rows = _mrv2_order(rows, k) if rng.random() < 0.7 else _cpp_order(rows)
    rows += [{"role": PAD, "q": 0, "prefilling": False, "drafts": -1, "computed": 0}] * pads

    qsl, seq_lens, seq_ub, prefilling, drafts, accepted, is_pad = [0], [], [], [], [], [], []
    for r in rows:
        q = r["q"]
        qsl.append(qsl[-1] + q)
        ub = 0 if r["role"] == PAD else r["computed"] + q
        lag = 0
        if async_spec and r["role"] in (DECODE, SPEC) and rng.random() < 0.6:
            lag = rng.randint(0, min(k, r["computed"]))
        seq_ub.append(ub)
        seq_lens.append(ub - lag)
        prefilling.append(r["prefilling"])
        # mamba_hybrid.py:303-321: drafts for rows not prefilling with 0 < q <= k + 1.
        decode_row = not r["prefilling"] and 0 < q <= k + 1
        if r["role"] == PROMPT_TAIL:
            drafts.append(r["drafts"])  # the builder's own rule (mamba_attn.py:431-437)
        else:
            drafts.append(r["drafts"] if decode_row else -1)
        if r["role"] in (DECODE, SPEC):
            accepted.append(rng.randint(1, k + 1))  # the previous step's count
        else:  # 1 for new, resumed, prefilling and padding rows (add_request resets it)
            accepted.append(1 if rng.random() < 0.95 else rng.randint(1, k + 1))
        is_pad.append(r["role"] == PAD)

    step = {
        "query_start_loc": qsl,
        "seq_lens": seq_lens,
        "seq_lens_cpu_upper_bound": seq_ub,
        "is_prefilling": prefilling,
        "num_actual_tokens": qsl[-1] + _token_padding(rng, builder),
        "tables": _tables(rng, c, seq_lens, seq_ub, is_pad, groups),
        "num_decode_draft_tokens_cpu": None,
        "num_accepted_tokens": None,
    }
    if k > 0 and builder == "bailing_linear":
        # The runner hands Bailing no counts; an engine calling build() itself may.
        step["num_accepted_tokens"] = accepted if rng.random() < 0.5 else None
    elif k > 0:
        step["num_accepted_tokens"] = accepted
        step["num_decode_draft_tokens_cpu"] = drafts if rng.random() < 0.95 else None
    return step


def make_case(rng: random.Random, builder: str, name: str, groups_percent: int,
              zero_drafts: float, replayssm: bool = False, capture: bool = False) -> dict:
    """`capture`: a capture step (FULL graphs) whatever the draw."""
    c = random_config(rng, builder, replayssm)
    if capture:
        c["full_cuda_graph"] = True
    else:
        capture = c["full_cuda_graph"] and rng.random() < 0.1
    if capture:
        s = _capture_step(rng, c, builder)
    else:
        groups = rng.randint(2, 4) if rng.randrange(100) < groups_percent else 1
        s = random_step(rng, c, builder, groups, zero_drafts)
    tables = s.pop("tables")
    step = {
        "query_start_loc": s["query_start_loc"],
        "seq_lens": s["seq_lens"],
        "seq_lens_cpu_upper_bound": s["seq_lens_cpu_upper_bound"],
        "is_prefilling": s["is_prefilling"],
        "num_actual_tokens": s["num_actual_tokens"],
        "block_table": tables[0],
        "num_decode_draft_tokens_cpu": s["num_decode_draft_tokens_cpu"],
        "num_accepted_tokens": s["num_accepted_tokens"],
    }
    if len(tables) > 1:
        step["groups"] = tables
    return {"name": name, "builder": builder, "mode": "capture" if capture else "build",
            "config": c, "step": step}


def _edge(builder: str, name: str, cfg: dict, mode: str = "build", **step) -> dict:
    c = {"num_spec": 0, "max_num_seqs": 16, "full_cuda_graph": True, "max_cudagraph_capture_size": 16,
         "mamba_cache_mode": "none", "block_size": 16, "num_speculative_blocks": 0,
         "use_recoverssm": False, "num_prefill_checkpoint_blocks": 0}
    c.update(cfg)
    c["num_speculative_blocks"] = 0 if builder == "inkling" else c["num_spec"]
    if builder == "inkling":
        c.setdefault("max_num_batched_tokens", 2048)
    if builder == "mamba2":
        c.setdefault("prefill_checkpoint_alignment", None)
        c.setdefault("chunk_size", 64)
    c["profile"] = "vllm-0.34"
    q = step.pop("q")
    qsl = [0]
    for x in q:
        qsl.append(qsl[-1] + x)
    seq = step.pop("seq")
    st = {"query_start_loc": qsl, "seq_lens": seq, "seq_lens_cpu_upper_bound": step.pop("ub", seq),
          "is_prefilling": step.pop("prefilling"), "num_actual_tokens": step.pop("tokens", qsl[-1])}
    width = step.pop("width", 1 + c["num_spec"])
    st["block_table"] = [[100 * (i + 1) + j for j in range(width)] for i in range(len(seq))]
    st["num_decode_draft_tokens_cpu"] = step.pop("drafts", None)
    st["num_accepted_tokens"] = step.pop("accepted", None)
    assert not step, step
    return {"name": f"mamba-edge/{builder}/{name}", "builder": builder, "mode": mode, "config": c, "step": st}


def edges() -> list[dict]:
    out = []
    for b in BUILDERS:
        if b == "inkling":
            continue  # its own edges below
        out += [
            # none-mode table of 1 column under k = 2, FULL pure decode: the staging copy_
            # broadcasts the column into the (D, 1 + k) buffer; of 2 columns: it raises.
            _edge(b, "narrow-table-broadcast", {"num_spec": 2}, q=[1, 3], seq=[9, 12],
                  prefilling=[False, False], width=1, drafts=[0, 2], accepted=[1, 2]),
            _edge(b, "narrow-table-raises", {"num_spec": 3}, q=[1, 3], seq=[9, 12],
                  prefilling=[False, False], width=2, drafts=[0, 2], accepted=[1, 2]),
            # align gather past the row (the table is too narrow for seq_len 40 at block 16).
            _edge(b, "align-gather-past-row", {"mamba_cache_mode": "align"}, q=[1, 1],
                  seq=[40, 3], prefilling=[False, False], width=2),
            # no is_prefilling (MRV2 always passes it): the Mamba base asserts, linear ignores it.
            _edge(b, "no-is-prefilling", {}, q=[1, 5], seq=[9, 5], prefilling=None),
            # a zero-length prefilling row first: counted a prefill; Mamba2's last chunk index -1.
            _edge(b, "zero-length-prefill-first", {}, q=[0, 5], seq=[0, 5], prefilling=[True, True]),
            # a zero-length prefilling row with prior state off the chunk grid: a 0-token chunk.
            _edge(b, "zero-length-prefill-offgrid", {"full_cuda_graph": False}, q=[4, 0],
                  seq=[4, 70], prefilling=[True, True]),
            # device seq_len below the host bound on a prefill row: has_initial_states_p reads
            # the device value, Mamba2's prep_initial_states the host one.
            _edge(b, "device-seq-below-bound-prefill", {"num_spec": 1}, q=[1, 5], seq=[7, 5],
                  ub=[7, 6], prefilling=[False, True], drafts=[0, -1], accepted=[1, 1]),
            # decodes after the first prefill row are prefills (no reorder).
            _edge(b, "decode-after-prefill", {}, q=[1, 5, 1], seq=[9, 5, 30],
                  prefilling=[False, True, False]),
            # k > 0, spec kwargs given, a verify row of 1 + k tokens first, then a 1-token
            # decode: the threshold is 1 + k (mamba2/short_conv), 1 (mamba1/linear).
            _edge(b, "verify-rows-threshold", {"num_spec": 2}, q=[3, 1], seq=[20, 9],
                  prefilling=[False, False], drafts=[2, 0], accepted=[2, 3]),
            # accepted counts but no drafts: no prompt-tail rule, one-token rule only.
            _edge(b, "accepted-without-drafts", {"num_spec": 2}, q=[2, 1, 6], seq=[20, 9, 6],
                  prefilling=[True, True, True], accepted=[1, 1, 1]),
            # capture of a non-uniform batch whose widest row is 1 + k: accepted = query lens.
            _edge(b, "capture-nonuniform", {"num_spec": 2}, mode="capture", q=[1, 3, 0],
                  seq=[1, 3, 0], prefilling=[False, False, False]),
        ]
    # Mamba2 checkpoints at block 16: a fresh 40-token prompt (checkpoint at 32) and a chunk
    # resumed from 16 to 60 (checkpoint at 48): both 32 tokens into their query, so alignment
    # 1 / 16 / 32 keep both and 24 declines both (checkpoint_meta None).
    for align in (1, 16, 24, 32):
        out.append(_edge("mamba2", f"checkpoint-alignment-{align}",
                         {"mamba_cache_mode": "align", "num_prefill_checkpoint_blocks": 1,
                          "prefill_checkpoint_alignment": align, "chunk_size": 64},
                         q=[40, 44], seq=[40, 60], prefilling=[True, True], width=6))
    # Inkling (I1, I2): padding, empty rows, the token capacity's edge, capture.
    ink = "inkling"
    out += [
        _edge(ink, "at-token-capacity", {}, q=[2000, 40], seq=[2000, 50], prefilling=[True, True],
              tokens=2048),
        _edge(ink, "past-token-capacity", {}, q=[2000, 40], seq=[2000, 50],
              prefilling=[True, True], tokens=2049),
        _edge(ink, "empty-rows-between", {}, q=[0, 0, 3, 0, 2], seq=[4, 5, 3, 8, 9],
              prefilling=[False, False, True, False, True], tokens=9),
        _edge(ink, "no-real-tokens", {}, q=[0, 0], seq=[4, 5], prefilling=[False, False], tokens=5),
        _edge(ink, "capture-uniform", {"num_spec": 1}, mode="capture", q=[2, 2, 2], seq=[2, 2, 2],
              prefilling=[False, False, False], tokens=8),
    ]
    return out


def stream(builder: str, seed: int, replayssm: bool = False) -> str:
    """The random.Random seed of main()'s stream."""
    return f"mamba_steps/{builder}/{seed}" + ("/replayssm" if replayssm else "")


def main() -> int:
    if sys.argv[1:] == ["--edges"]:
        for case in edges():
            sys.stdout.write(json.dumps(case, separators=(",", ":")) + "\n")
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builder", required=True, choices=BUILDERS)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--groups-percent", type=int, default=15)
    ap.add_argument("--zero-drafts-percent", type=int, default=0)
    ap.add_argument("--replayssm", action="store_true")
    a = ap.parse_args()
    if a.count < 0 or not 0 <= a.groups_percent <= 100 or not 0 <= a.zero_drafts_percent <= 100:
        ap.error("bad --count / --groups-percent / --zero-drafts-percent")
    if a.replayssm and a.builder not in REPLAYSSM:
        ap.error(f"--replayssm: {a.builder} is no BaseMambaAttentionMetadataBuilder ({REPLAYSSM})")
    rng = random.Random(stream(a.builder, a.seed, a.replayssm))
    out = sys.stdout
    tag = "-replayssm" if a.replayssm else ""
    for i in range(a.count):
        case = make_case(rng, a.builder, f"mambagen{tag}-{a.seed}/{a.builder}/{i}",
                         a.groups_percent, a.zero_drafts_percent / 100, a.replayssm)
        out.write(json.dumps(case, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
