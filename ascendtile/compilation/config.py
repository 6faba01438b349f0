"""CompilationConfig: how the model forward is compiled (vLLM's vocabulary and levels).

level 0 NO_COMPILATION  the forward runs eagerly.
level 1 DYNAMO_AS_IS    torch.compile as is: Dynamo's guards run every call and may recompile.
level 2 DYNAMO_ONCE     one Dynamo trace with the token / batch dims and the metadata ints dynamic;
                        later calls skip guard evaluation and always run that one graph.
level 3 PIECEWISE       level 2 with the graph split at `splitting_ops` (attention): the pieces
                        between them compiled one by one and, on NPU/CUDA, captured as a device
                        graph per capture size; the splitting ops run eagerly between them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path



def check_fields(argument: str, value: dict, cls: type) -> None:
    """ValueError naming `argument` when `value`, the dict form of dataclass config `cls` that a
    user passed to LLM (compilation_config here, also runtime's speculative_config), has keys that
    are not its fields: an unknown key is an error, never ignored."""
    unknown = set(value) - set(cls.__dataclass_fields__)
    if unknown:
        raise ValueError(f"{argument}: unknown field(s) {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")


class CompilationLevel(IntEnum):
    NO_COMPILATION = 0
    DYNAMO_AS_IS = 1
    DYNAMO_ONCE = 2
    PIECEWISE = 3


# Ops the piecewise split cuts at: they read and write the paged KV cache, whose layout the rest of
# the graph does not see, and on devices they stay eager between captured pieces (as in vLLM).
DEFAULT_SPLITTING_OPS = ("ascend::unified_attention", "ascend::mla_attention", "ascend::paged_attention",
                         "ascend::flash_attention_varlen")


def default_cache_dir() -> str:
    """$ASCENDTILE_CACHE_DIR/compile, else ~/.cache/ascendtile/compile: per user and kept across
    processes, so a second process compiling the same model reads Inductor's cached graphs (not
    CPU level 2's, whose frozen weights the FX graph cache bypasses)."""
    return str(Path(os.environ.get("ASCENDTILE_CACHE_DIR", "~/.cache/ascendtile")).expanduser() / "compile")


def default_capture_sizes(max_num_seqs: int) -> list[int]:
    """Powers of two from 1 up to the first one >= max_num_seqs (every decode batch fits)."""
    sizes = [1]
    while sizes[-1] < max_num_seqs:
        sizes.append(sizes[-1] * 2)
    return sizes


@dataclass
class CompilationConfig:
    """level: 0-3 (CompilationLevel). splitting_ops: "ascend::<op>" names, each a registered op.
    cache_dir: Inductor's on-disk caches (default_cache_dir()); the FX graph cache is what hits
    (AOTAutograd's cache bypasses graphs holding the CPU references, Python functions it cannot hash;
    the FX graph cache bypasses CPU level 2's graph, which holds oneDNN-packed weights).
    use_inductor: False runs the Dynamo graph after the fusion passes without Inductor (fast to
    build; used by tests). enable_fusion: run the FX fusion passes (norm/activation + int8 quant).
    capture_sizes: level 3 on NPU/CUDA, the token counts each piece is captured at (vLLM's
    cudagraph_capture_sizes), ascending; None: default_capture_sizes(max_num_seqs).
    cpu_decode_graph: CPU level 2 (an error at other levels; devices have no use for it and ignore
    it), decode steps run a graph of their own with no `ascend` op (compiled_model.py). Off by
    default: on a 2-core CPU it adds ~4 minutes of compile for a 30-layer model (SmolLM2), against
    ~1 for the general graph."""

    level: int = CompilationLevel.NO_COMPILATION
    splitting_ops: list[str] = field(default_factory=lambda: list(DEFAULT_SPLITTING_OPS))
    cache_dir: str = field(default_factory=default_cache_dir)
    use_inductor: bool = True
    enable_fusion: bool = True
    capture_sizes: list[int] | None = None
    cpu_decode_graph: bool = False

    def __post_init__(self) -> None:
        from ascendtile.ops import REGISTERED

        if isinstance(self.level, bool) or not isinstance(self.level, int) or self.level not in set(CompilationLevel):
            raise ValueError(f"level: must be one of {[int(v) for v in CompilationLevel]} "
                             f"({', '.join(v.name for v in CompilationLevel)}), got {self.level!r}")
        self.level = CompilationLevel(self.level)
        if isinstance(self.splitting_ops, str):
            raise TypeError("splitting_ops: expected a list of 'ascend::<op>' names, got a str")
        for name in self.splitting_ops:
            namespace, _, op = str(name).partition("::")
            if namespace != "ascend" or op not in REGISTERED:
                raise ValueError(f"splitting_ops: {name!r} is not a registered 'ascend::<op>' name")
        if not isinstance(self.cache_dir, (str, os.PathLike)):
            raise TypeError(f"cache_dir: expected a path, got {self.cache_dir!r}")
        self.cache_dir = str(Path(self.cache_dir).expanduser())
        sizes = self.capture_sizes
        if sizes is not None and (isinstance(sizes, (str, bytes)) or not sizes
                                  or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes)
                                  or list(sizes) != sorted(set(sizes))):
            raise ValueError(f"capture_sizes: expected ascending distinct positive ints, got {sizes!r}")
        for flag in ("use_inductor", "enable_fusion", "cpu_decode_graph"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag}: expected a bool, got {getattr(self, flag)!r}")
        if self.cpu_decode_graph and self.level != CompilationLevel.DYNAMO_ONCE:
            raise ValueError(f"cpu_decode_graph: only level 2 (DYNAMO_ONCE) has a decode graph, got level {int(self.level)}")

    def capture_sizes_for(self, max_num_seqs: int) -> tuple[int, ...]:
        """The capture sizes: capture_sizes if given, else default_capture_sizes(max_num_seqs)."""
        return tuple(self.capture_sizes if self.capture_sizes is not None else default_capture_sizes(max_num_seqs))

    @classmethod
    def from_user(cls, value: "CompilationConfig | dict | int | None") -> "CompilationConfig":
        """What LLM(compilation_config=...) accepts: a config, a dict of its fields, a level, or None
        (level 0)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            check_fields("compilation_config", value, cls)
            return cls(**value)
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(level=value)
        raise TypeError(f"compilation_config: expected a CompilationConfig, dict or int level, got {type(value).__name__}")
