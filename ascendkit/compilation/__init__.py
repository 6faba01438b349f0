"""torch.compile integration (vLLM's compilation levels): CompilationConfig, the Dynamo backend
with FX fusion passes and, on CPU, Inductor over the ops' torch references."""
from ascendkit.compilation.compiled_model import CompiledModel, compile_model
from ascendkit.compilation.config import CompilationConfig, CompilationLevel

__all__ = ["CompilationConfig", "CompilationLevel", "CompiledModel", "compile_model"]
