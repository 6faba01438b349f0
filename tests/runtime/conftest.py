import pytest
import torch


@pytest.fixture(autouse=True)
def _one_thread():
    """The runtime's many tiny per-step tensor ops pay ~10 ms each for waking a second intra-op
    thread on a shared, oversubscribed CI machine; one thread keeps these tests fast."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
