"""A compiled forward of a validated step runs the registered ops without their validators
(`_registry.trusted_calls`); everything else still validates every call."""
import contextlib

import pytest
import torch

import ascendtile.compilation.compiled_model as compiled_model
from ascendtile.compilation import CompilationConfig, CompiledModel
from ascendtile.model import load_model
from ascendtile.model.attention_metadata import AttentionMetadata
from ascendtile.ops._registry import trusted_calls
from compilation import tiny


def _cache_write(kv_cache_dtype: str) -> None:
    key = torch.randn(1, 2, 8)
    cache = torch.zeros(4, 16, 2, 8)
    torch.ops.ascend.reshape_and_cache_flash(key, key.clone(), cache, cache.clone(), torch.tensor([3]), kv_cache_dtype,
                                             torch.ones(()), torch.ones(()))


def test_registered_op_validates_outside_trusted_calls_only():
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        _cache_write("fp8")
    with trusted_calls():
        _cache_write("fp8")  # the validator is skipped (the reference reads only "auto" caches' values)
        with trusted_calls():
            pass
        _cache_write("fp8")  # still trusted after a nested context ends
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        _cache_write("fp8")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny.save(tmp_path_factory.mktemp("tiny"))


def _compiled(tiny_dir) -> CompiledModel:
    return CompiledModel(load_model(tiny_dir).model, CompilationConfig(level=2, use_inductor=False))


@pytest.fixture
def trust_entries(monkeypatch) -> list:
    """One entry per compiled forward that ran under trusted_calls."""
    entered = []

    @contextlib.contextmanager
    def counting():
        entered.append(True)
        with trusted_calls():
            yield

    monkeypatch.setattr(compiled_model, "trusted_calls", counting)
    return entered


def test_compiled_forward_of_validated_steps_runs_trusted(tiny_dir, trust_entries):
    compiled = _compiled(tiny_dir)
    logits = tiny.run_steps(compiled.model, compiled)  # the driver validates every step
    assert len(trust_entries) == len(tiny.STEPS) and all(torch.isfinite(x).all() for x in logits)


def test_compiled_forward_of_unvalidated_steps_validates(tiny_dir, trust_entries):
    compiled = _compiled(tiny_dir)
    compiled.allocate_kv_cache(2, 16, torch.float32, "cpu")
    meta = AttentionMetadata(slot_mapping=torch.tensor([16, 17], dtype=torch.int64),
                             block_tables=torch.tensor([[1]], dtype=torch.int32),
                             cu_seqlens_q=torch.tensor([0, 2], dtype=torch.int32),
                             seqused_k=torch.tensor([2], dtype=torch.int32), max_seqlen_q=2, max_seqlen_k=2)
    with torch.no_grad():
        assert torch.isfinite(compiled(torch.tensor([3, 4]), torch.tensor([0, 1]), meta)).all()
    assert trust_entries == []
