"""Level 3's per-size capture of the pieces, on CPU with a fake device graph (capture runs the
function and keeps its outputs as the static outputs; replay reruns it into them, as a real graph
would): the capture sizes a step pads to, larger steps uncaptured, one capture per (piece, size),
one static buffer per token input shared by every size, in-place writes copied back, logits equal
to the uncaptured run, and a token-independent input that moved raising."""
import pytest
import sympy
import torch

from ascendtile.compilation import CaptureSpec, CompilationConfig, compile_model
from ascendtile.compilation.piece_capture import CapturedPiece
from ascendtile.compilation.piece_signature import PieceSignature
from ascendtile.model import load_model
from compilation import tiny

SIZES = (1, 2, 4)
TOKENS = sympy.Symbol("s0", positive=True, integer=True)


class FakeGraph:
    """The DeviceGraph protocol on CPU, counting its replays."""

    def capture(self, fn):
        self.fn, self.outputs, self.replays = fn, fn(), 0
        return self.outputs

    def replay(self):
        self.replays += 1
        for static, new in zip(self.outputs, self.fn()):
            static.copy_(new)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    model = load_model(tiny.save(tmp_path_factory.mktemp("tiny"))).model
    eager = tiny.run_steps(model)
    compiled = compile_model(model, CompilationConfig(level=3, use_inductor=False), CaptureSpec(FakeGraph, SIZES))
    return eager, compiled, tiny.run_steps(model, compiled)


def test_captured_pieces_match_eager(captured):
    eager, compiled, got = captured
    for g, e in zip(got, eager):  # STEPS: 16 tokens (uncaptured), 2 (size 2), 3 (padded to 4), 1 (size 1)
        torch.testing.assert_close(g, e, rtol=0, atol=1e-5)
    pieces = compiled.backend.captured
    assert len(pieces) == len(compiled.backend.splits[0].pieces) == 3
    for piece in pieces:
        assert sorted(piece.graphs) == [1, 2, 4]
        # the graph of size 4 ran on 4 rows; the step had 3
        assert all(out.shape[0] == 4 for out, sliced in zip(piece.graphs[4][1], piece.signature.sliced) if sliced)
        assert [piece.graphs[size][0].replays for size in (1, 2, 4)] == [1, 1, 1]  # one per captured step


def test_one_static_buffer_per_token_input(captured):
    _, compiled, _ = captured
    for piece in compiled.backend.captured:
        assert sorted(piece.buffers) == piece.signature.token
        for buffer in piece.buffers.values():
            assert buffer.shape[0] == SIZES[-1]
    # the residual stream is written in place by the pieces after the first (fused_add_rms_norm)
    assert [bool(p.signature.written) for p in compiled.backend.captured] == [False, True, True]


def test_bucket_choice_and_copy_back():
    """A hand-made piece: out = x * 2 and x += 1 in place, token rows of x; sizes 2 and 8."""
    calls = []

    def fn(x, n):
        calls.append((x.shape[0], n))
        x.add_(1)
        return (x * 2,)

    signature = PieceSignature(token=[0], ints={1: TOKENS}, fixed=[], written=[0], sliced=[True], symbol=TOKENS)
    piece = CapturedPiece("piece", fn, signature, CaptureSpec(FakeGraph, (2, 8)))
    buffer = None
    for rows in (3, 5, 2, 9, 1):
        x = torch.arange(rows, dtype=torch.float32)
        calls.clear()
        (out,) = piece(x, rows)
        torch.testing.assert_close(x, torch.arange(rows, dtype=torch.float32) + 1, rtol=0, atol=0)
        torch.testing.assert_close(out, x * 2, rtol=0, atol=0)
        size = 9 if rows == 9 else 8 if rows > 2 else 2  # 9: past the largest size, uncaptured
        assert set(calls) == {(size, size)}, (rows, calls)  # padded rows, the int re-evaluated
        buffer = buffer if buffer is not None else piece.buffers[0]
        assert piece.buffers[0] is buffer and buffer.shape == (8,)  # one buffer for every size
    assert sorted(piece.graphs) == [2, 8]


def test_moved_fixed_input_raises():
    signature = PieceSignature(token=[0], ints={}, fixed=[1], written=[], sliced=[True], symbol=TOKENS)
    piece = CapturedPiece("submod_0", lambda x, w: (x * w,), signature, CaptureSpec(FakeGraph, (4,)))
    weight = torch.ones(())
    piece(torch.ones(3), weight)
    with pytest.raises(RuntimeError, match=r"^submod_0: token-independent input\(s\) at \[1\] changed"):
        piece(torch.ones(3), torch.ones(()))
