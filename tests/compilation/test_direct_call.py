"""capturing_bytecode: the functions Dynamo compiles a function into, called directly."""
import torch

from ascendtile.compilation.direct_call import capturing_bytecode


def _scaled(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
    return x * factor + 1


def _other(x: torch.Tensor) -> torch.Tensor:
    return x - 1


def test_captures_each_compile_of_its_function_only():
    backend_calls = []

    def backend(gm, example_inputs):
        backend_calls.append(gm)
        return gm.forward

    compiled, other = torch.compile(_scaled, backend=backend), torch.compile(_other, backend=backend)
    with capturing_bytecode(_scaled) as codes:
        compiled(torch.ones(3))
        other(torch.ones(3))  # another function's compile is not captured
        compiled(torch.ones(3))  # served by the entry already compiled: nothing new
        compiled(torch.ones(2, 2, dtype=torch.float64))  # a new entry (dtype guard)
    assert len(backend_calls) == 3 and len(codes) == 2
    x = torch.arange(6.0).view(2, 3)
    torch.testing.assert_close(codes[1](x.double()), x.double() * 2 + 1, rtol=0, atol=0)
    # no guard runs in a direct call: the float64 entry takes a float32 tensor too, and the
    # default argument still holds
    assert codes[1](x).dtype == torch.float32
    torch.testing.assert_close(codes[0](x), x * 2 + 1, rtol=0, atol=0)
    compiled(torch.ones(3))  # outside the block nothing is captured
    assert len(codes) == 2
