"""Fixtures shared by the model tests."""
import pytest

from ascendtile.distributed import group


@pytest.fixture
def as_rank(monkeypatch):
    """Pretend this process is `rank` of a tensor-parallel group of `size` (no process group:
    building and loading a model runs no collective)."""
    def set_rank(size: int, rank: int) -> None:
        monkeypatch.setattr(group._GROUP, "size", size)
        monkeypatch.setattr(group._GROUP, "rank", rank)
    return set_rank
