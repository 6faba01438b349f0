"""C++ kernels for the CPU path, where the pure-torch references and Inductor's code for them fall
well short of what the CPU can do: each is built on first use by the system C++ compiler
(build.py) into the compile cache and loaded with ctypes, and is registered as an op of the
internal `ascendtile` namespace, not part of the `ascend` op contract (no Triton kernel, no NPU
path); the ops' bodies are C++ in torch's dispatcher (dispatch.py). Where no compiler
works, callers keep the reference path."""
