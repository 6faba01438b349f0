"""CompilationConfig: how the model forward is compiled (vLLM's vocabulary and levels).

level 0 NO_COMPILATION  the forward runs eagerly.
level 1 DYNAMO_AS_IS    torch.compile as is: Dynamo's guards run every call and may recompile.
level 2 DYNAMO_ONCE     one Dynamo trace with the token / batch dims and the metadata ints dynamic;
                        later calls skip guard evaluation and always run that one graph.
level 3 PIECEWISE       level 2 with the graph split at `splitting_ops` (attention), pieces
                        compiled separately.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path


class CompilationLevel(IntEnum):
    NO_COMPILATION = 0
    DYNAMO_AS_IS = 1
    DYNAMO_ONCE = 2
    PIECEWISE = 3


# Ops the piecewise split cuts at: they read and write the paged KV cache, whose layout the rest of
# the graph does not see, and on devices they stay eager between captured pieces (as in vLLM).
DEFAULT_SPLITTING_OPS = ("ascend::unified_attention", "ascend::mla_attention", "ascend::paged_attention",
                         "ascend::flash_attention_varlen")


@dataclass
class CompilationConfig:
    """level: 0-3 (CompilationLevel). splitting_ops: "ascend::<op>" names, each a registered op.
    cache_dir: Inductor's on-disk cache (None: torch's default). use_inductor: False runs the
    Dynamo graph after the fusion passes without Inductor (fast to build; used by tests).
    enable_fusion: run the FX fusion passes (norm/activation + int8 quant)."""

    level: int = CompilationLevel.NO_COMPILATION
    splitting_ops: list[str] = field(default_factory=lambda: list(DEFAULT_SPLITTING_OPS))
    cache_dir: str | None = None
    use_inductor: bool = True
    enable_fusion: bool = True

    def __post_init__(self) -> None:
        from ascendkit.ops import REGISTERED

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
        if self.cache_dir is not None:
            self.cache_dir = str(Path(self.cache_dir).expanduser())
        for flag in ("use_inductor", "enable_fusion"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag}: expected a bool, got {getattr(self, flag)!r}")

    @classmethod
    def from_user(cls, value: "CompilationConfig | dict | int | None") -> "CompilationConfig":
        """What LLM(compilation_config=...) accepts: a config, a dict of its fields, a level, or None
        (level 0)."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = set(value) - set(cls.__dataclass_fields__)
            if unknown:
                raise ValueError(f"compilation_config: unknown field(s) {sorted(unknown)}; "
                                 f"known: {sorted(cls.__dataclass_fields__)}")
            return cls(**value)
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(level=value)
        raise TypeError(f"compilation_config: expected a CompilationConfig, dict or int level, got {type(value).__name__}")
