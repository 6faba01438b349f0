"""torch.compile integration (vLLM's compilation levels): CompilationConfig, the Dynamo backend
with FX fusion passes and, on CPU, Inductor over the ops' torch references; level 3 splits the graph
at attention and captures the pieces per size on NPU/CUDA."""
from ascendtile.compilation.compiled_model import CompiledModel, compile_model
from ascendtile.compilation.config import CompilationConfig, CompilationLevel
from ascendtile.compilation.piece_capture import CaptureSpec, DeviceGraph, TorchDeviceGraphs, piece_capture

__all__ = ["CaptureSpec", "CompilationConfig", "CompilationLevel", "CompiledModel", "DeviceGraph", "TorchDeviceGraphs",
           "compile_model", "piece_capture"]
