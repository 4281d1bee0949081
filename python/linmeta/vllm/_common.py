"""What linmeta.vllm's builder classes share.

* vLLM's base builder class (or a stand-in with the parts the builders use, without vLLM);
* the rules profile of the running vLLM;
* ``Builder``: the mixin every class of this package takes: the fallback to vLLM's own class
  for configurations linmeta does not serve, the builder object's own native engine, and
  ``build`` / ``build_for_cudagraph_capture`` / ``update_block_table``, each one native call;
* the configuration read from vLLM's config objects.

The per-step work (reading the inputs, one plan and one launch, the result dicts) is the
native engine's (python/src/vllm/engine.hpp). Nothing is shared between builder objects.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import logging
import os
import sys

import torch

from .. import _linmeta

logger = logging.getLogger("linmeta.vllm")

# Token capacity when the scheduler config has none (stand-in configs): steps must fit it.
_DEFAULT_TOKEN_CAPACITY = 1 << 16


# ---------------------------------------------------------------------------------------------
# vLLM's base class, or the parts of it the builders use


def _import_vllm_base():
    for mod in ("vllm.v1.attention.backend", "vllm.v1.attention.backends.utils"):
        try:
            m = importlib.import_module(mod)
            return m.AttentionMetadataBuilder, m.AttentionCGSupport
        except Exception:  # noqa: BLE001 - vLLM absent or a different layout
            continue
    return None, None


_VllmBase, _VllmCGSupport = _import_vllm_base()


class _LocalCGSupport(enum.Enum):
    """vLLM's AttentionCGSupport (without vLLM)."""

    ALWAYS = 3
    UNIFORM_BATCH = 2
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    NEVER = 0


AttentionCGSupport = _VllmCGSupport if _VllmCGSupport is not None else _LocalCGSupport


class _LocalAttentionMetadataBuilder:
    """The parts of vLLM's AttentionMetadataBuilder the builders use (without vLLM)."""

    _cudagraph_support = AttentionCGSupport.NEVER
    reorder_batch_threshold: int | None = None
    supports_update_block_table: bool = False

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        self.kv_cache_spec = kv_cache_spec
        self.layer_names = layer_names
        self.vllm_config = vllm_config
        self.device = device

    @classmethod
    def get_cudagraph_support(cls, vllm_config, kv_cache_spec):
        return cls._cudagraph_support

    def _init_reorder_batch_threshold(self, reorder_batch_threshold=1, supports_spec_as_decode=False,
                                      supports_dcp_with_varlen=False):
        threshold = reorder_batch_threshold
        spec = self.vllm_config.speculative_config
        if threshold is not None and supports_spec_as_decode and spec is not None:
            per_draft = 2 if getattr(spec, "parallel_drafting", False) else 1
            threshold = max(threshold, 1 + per_draft * (spec.num_speculative_tokens or 0))
        dcp = getattr(getattr(self.vllm_config, "parallel_config", None),
                      "decode_context_parallel_size", 1)
        if threshold is not None and dcp > 1 and not supports_dcp_with_varlen:
            threshold = 1
        self.reorder_batch_threshold = threshold

    def use_cascade_attention(self, *args, **kwargs) -> bool:
        return False


Base = _VllmBase if _VllmBase is not None else _LocalAttentionMetadataBuilder


# ---------------------------------------------------------------------------------------------
# The rules profile


def default_profile(env: str | None, vllm_version: str | None) -> str | None:
    """The rules of the native builders (docs/vllm.md): LINMETA_VLLM_PROFILE when set ("seed"
    or "vllm-0.34"); else "vllm-0.34" under vLLM 0.34.x, the seed rules (None) under any other
    vLLM (logged: not checked against it) and without vLLM."""
    if env:
        return env
    if vllm_version is None:
        return None
    if vllm_version.startswith("0.34."):
        return "vllm-0.34"
    logger.warning(
        "linmeta.vllm: vLLM %s has no rules profile of its own; GDN / KDA follow the seed rules "
        "(LINMETA_VLLM_PROFILE=vllm-0.34 selects vLLM 0.34's)", vllm_version)
    return None


def _vllm_version() -> str | None:
    v = getattr(sys.modules.get("vllm"), "__version__", None)
    return v if isinstance(v, str) else None


_UNSET = object()
_profile = _UNSET  # the settled profile (profile(), set_profile())


def profile() -> str | None:
    """The rules profile the builder objects made now follow ("vllm-0.34", "seed"; None: the
    seed rules). Settled once per process, on first use: set_profile()'s choice when a caller
    made one, else default_profile() (LINMETA_VLLM_PROFILE, else the running vLLM's version).
    The one place every class of this package asks."""
    global _profile
    if _profile is _UNSET:
        _profile = default_profile(os.environ.get("LINMETA_VLLM_PROFILE"), _vllm_version())
    return _profile


def set_profile(value: str | None) -> None:
    """Chooses the rules profile explicitly ("vllm-0.34", "seed", or None for the seed rules)
    for the builder objects made from now on, instead of the environment's default."""
    global _profile
    if value not in (None, "seed", "vllm-0.34"):
        raise ValueError(f"linmeta.vllm: profile {value!r} must be 'seed', 'vllm-0.34' or None")
    _profile = value


# ---------------------------------------------------------------------------------------------
# Metadata objects


def check_plain_dataclass(cls) -> None:
    """The builders make vLLM's metadata objects with their fields as the instance __dict__:
    equal to calling __init__ with them for a plain dataclass (no __post_init__, slots,
    frozen, or default factories: a factory's object would be one object in every result).
    Any other class is refused."""
    if (not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__")
            or "__slots__" in cls.__dict__ or cls.__dataclass_params__.frozen
            or any(f.default_factory is not dataclasses.MISSING  # type: ignore[misc]
                   for f in dataclasses.fields(cls))):
        raise TypeError(f"linmeta.vllm: {cls.__qualname__} is not a plain dataclass")


def defaults(cls) -> dict:
    """The default of every field of dataclass `cls` (None where it has none; a plain
    dataclass has no default factories)."""
    return {f.name: None if f.default is dataclasses.MISSING else f.default
            for f in dataclasses.fields(cls)}


def vllm_class(module: str, name: str):
    """vLLM's class `module.name`, or None."""
    try:
        return getattr(importlib.import_module(module), name)
    except Exception:  # noqa: BLE001 - vLLM absent, or a build without that model
        return None


# ---------------------------------------------------------------------------------------------
# Devices


def with_index(device) -> torch.device:
    """`device` as a torch.device; a CUDA device without an index is torch's current one."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


# ---------------------------------------------------------------------------------------------
# The builders' shared part


class Builder:
    """The mixin of linmeta.vllm's builder classes (before vLLM's base class in their bases).

    A subclass sets ``kind`` (linmeta.BUILDER_KINDS), ``replaces`` ((module, class) of vLLM's
    builder it stands in for), and defines ``metadata_class()``, ``linmeta_config()`` and,
    where some configuration is not served, ``unsupported()``."""

    kind: str = ""
    replaces: tuple[str, str] = ("", "")
    #: composite fields vLLM returns as dataclasses: {field ("a.b" nested): dataclass}
    composite_classes: dict = {}

    def __new__(cls, kv_cache_spec, layer_names, vllm_config, device):
        reason = cls.unsupported(kv_cache_spec, vllm_config)
        if reason is None:
            return super().__new__(cls)
        theirs = vllm_class(*cls.replaces)
        if theirs is None:
            raise NotImplementedError(f"linmeta.vllm.{cls.__name__}: {reason}")
        logger.info("linmeta: %s falls back to vLLM's builder: %s", cls.__name__, reason)
        return theirs(kv_cache_spec, layer_names, vllm_config, device)

    @classmethod
    def unsupported(cls, kv_cache_spec, vllm_config) -> str | None:
        """Why this configuration is left to vLLM's builder, or None."""
        return None

    def _join_engine(self, device, scratch=None) -> None:
        """Makes this builder object's own native builder (one KV-cache group) and engine:
        nothing is shared with another builder object. `scratch`: called with the native
        builder, {field: persistent tensor} of the fields the engine hands out as views of
        their first ``replayssm_rows`` rows (ReplaySSM's, mamba.py)."""
        cls = self.metadata_class()
        check_plain_dataclass(cls)
        classes = self.composite_classes_of()
        for c in classes.values():
            check_plain_dataclass(c)
        self._cls = cls
        device = with_index(device)
        kw = dict(self.linmeta_config(), target="cuda" if device.type == "cuda" else "host",
                  array_type="torch")
        if device.type == "cuda":
            with torch.cuda.device(device):
                builder = _linmeta.MetadataBuilder(self.kind, **kw)
        else:
            builder = _linmeta.MetadataBuilder(self.kind, **kw)
        fields = defaults(cls)
        views = {k: v for k, v in (scratch(builder) if scratch else {}).items() if k in fields}
        self._engine = _linmeta.vllm.Engine(builder, cls, fields, classes, views)

    def composite_classes_of(self) -> dict:
        return {}

    def common_config(self) -> dict:
        """The configuration every kind reads as vLLM's builders read it."""
        vc, spec = self.vllm_config, self.kv_cache_spec
        cc = vc.compilation_config
        cap = cc.max_cudagraph_capture_size
        tokens = getattr(vc.scheduler_config, "max_num_batched_tokens", None)
        return dict(
            num_spec=int(vc.speculative_config.num_speculative_tokens or 0)
            if vc.speculative_config else 0,
            max_num_seqs=int(vc.scheduler_config.max_num_seqs),
            max_num_batched_tokens=int(tokens) if tokens else _DEFAULT_TOKEN_CAPACITY,
            full_cuda_graph=bool(cc.cudagraph_mode is not None
                                 and cc.cudagraph_mode.has_full_cudagraphs()),
            max_cudagraph_capture_size=None if cap is None else int(cap),
            mamba_cache_mode=vc.cache_config.mamba_cache_mode,
            block_size=int(spec.block_size),
            num_speculative_blocks=int(getattr(spec, "num_speculative_blocks", 0) or 0),
        )

    @staticmethod
    def checkpoint_config(spec, default_alignment: int | None) -> dict:
        """The layer's prefill checkpoints (vLLM's MambaSpec): none where it declares no
        alignment."""
        blocks = int(getattr(spec, "num_prefill_checkpoint_blocks", 0) or 0)
        alignment = getattr(spec, "prefill_checkpoint_alignment", default_alignment)
        if blocks == 0 or alignment is None:
            return dict(num_prefill_checkpoint_blocks=0)
        return dict(num_prefill_checkpoint_blocks=blocks,
                    prefill_checkpoint_alignment=int(alignment))

    # -- vLLM's interface: one native call each

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False, *,
              num_accepted_tokens=None, num_decode_draft_tokens_cpu=None, **kwargs):
        return self._engine.build(common_attn_metadata, num_accepted_tokens,
                                  num_decode_draft_tokens_cpu, False)

    def build_for_cudagraph_capture(self, common_attn_metadata):
        return self._engine.build(common_attn_metadata, None, None, True)

    def update_block_table(self, metadata, blk_table, slot_mapping):
        return self._engine.update_block_table(metadata, blk_table)



class V034Builder(Builder):
    """A class of this package with vLLM 0.34's rules only and nothing of its own to set
    before its engine (linear attention, Inkling)."""

    @classmethod
    def unsupported(cls, kv_cache_spec, vllm_config):
        return None if profile() == "vllm-0.34" else "linmeta has vLLM 0.34's rules only"

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._join_engine(device)


def register_with_vllm(classes) -> list[str]:
    """Makes each linmeta class count as the vLLM class it replaces where vLLM tests with
    isinstance (vLLM 0.34's runner hands the spec-decode counts only to builders that are its
    GDN / Mamba2 / ShortConv builders, and binds the deferred RecoverSSM only to its KDA
    builder): a virtual subclass (abc registration), inheriting none of vLLM's code. Returns
    the vLLM classes registered with."""
    done = []
    for ours in classes:
        theirs = vllm_class(*ours.replaces)
        if theirs is None or not hasattr(theirs, "register"):
            continue
        if not issubclass(ours, theirs):
            theirs.register(ours)
        done.append(".".join(ours.replaces))
    return done
