# Every target sets itself up: the first run creates .venv and installs
# torch (CPU build) first, then this project with its test and integrations extras (torch pinned
# again in that command, so no integration package can pull another torch).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# the compiled module's source is part of the install: a change to it installs (and builds) again
BUILD_INPUTS := pyproject.toml setup.py src/elastic_loader/_pipeline/_native.c
STAMP := $(VENV)/.installed-$(shell cat $(BUILD_INPUTS) | sha1sum | cut -c1-12)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: test lint typecheck unit fuzz demo proofs deep bench bench-install bench-peers bench-memory vectors soak mutation clean

$(STAMP): $(BUILD_INPUTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
	$(PY) -m pip install -q "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
	$(PY) -m pip install -q -e ".[test,integrations]" "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
	$(PY) -c "import torch, lancedb, elastic_loader, pytorch_lightning, torchdata, accelerate"
	$(PY) -c "import torch; v = torch.__version__; assert v == '2.13.0+cpu', v"
	@rm -f $(VENV)/.installed-*
	@touch $@

## test: lint, type-check and run the whole test suite (the CI command)
test: lint typecheck unit

lint: $(STAMP)
	$(PY) -m ruff check src tests proofs benchmarks

typecheck: $(STAMP)
	$(PY) -m mypy --strict src

unit: $(STAMP)
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(PY) -m pytest -q

## fuzz: the checkpoint and parameter fuzzers with a deep budget (FUZZ_EXAMPLES; make test runs 20 each)
fuzz: $(STAMP)
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-2000} $(PY) -m pytest -q -p no:cacheprovider tests/fuzz

## demo: the project's main job
demo: $(STAMP)
	$(PY) -m elastic_loader.examples.demo

## proofs: SMT proofs and bounded exhaustive model checks of every invariant
proofs: $(STAMP)
	$(PY) -m proofs

## deep: the property and state-machine tests with the deep Hypothesis profile
deep: $(STAMP)
	HYPOTHESIS_PROFILE=deep $(PY) -m pytest -q -p no:cacheprovider tests

## mutation: mutation testing of the pipeline's ordering, checkpoint and packing code (mutmut), then the score
mutation: $(STAMP)
	$(PY) -m pip install -q -e ".[test,mutation]" 2>&1 | grep -v "^WARNING: Location" || true
	rm -rf mutants
	HYPOTHESIS_PROFILE=ci PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/mutmut run --max-children $${MUTATION_CHILDREN:-2}
	$(PY) .mutation/score.py --markdown

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

## vectors: regenerate the language-neutral test vectors under spec/vectors/
vectors: $(STAMP)
	$(PY) -m elastic_loader.testing.vectors generate

## bench: the side-by-side ratio table (elastic-loader vs lancedb.streaming vs raw take);
## writes benchmarks/results.local.json (git-ignored), or the committed benchmarks/results.json with SAVE=1
bench: $(STAMP)
	$(PY) benchmarks/compare.py $(if $(SAVE),--save)

## bench-install: the bench extra (peer loaders), with --no-deps: the peers' own requirements would
## pull torchvision (its PyPI build needs CUDA torch), numpy<2.2 and cloud SDKs; the extra pins what
## they really need at run time. Then check that torch is still the CPU build 2.13.0.
bench-install: $(STAMP)
	$(PY) -m pip install -q --no-deps $$($(PY) benchmarks/meta.py extra bench) 2>&1 | grep -v "^WARNING: Location" || true
	$(PY) -c "import torch; v = torch.__version__; assert v == '2.13.0+cpu', v; print('torch', v)"

## bench-peers: elastic-loader vs lance.torch, litdata, mosaicml-streaming, torchdata and raw reads
## (throughput and shuffle quality); PEERS_ARGS passes options (e.g. "--rows 50000 --rounds 1", "--large");
## writes benchmarks/peers.local.json, or the committed benchmarks/peers.json with SAVE=1
bench-peers: bench-install
	$(PY) benchmarks/peers.py $(if $(SAVE),--save) $(PEERS_ARGS)

## bench-memory: peak RSS growth of the read-ahead with 1 MiB rows and a slow consumer, elastic-loader
## and lancedb.streaming, in-process and with 2 workers; MEMORY_ARGS passes options (e.g.
## "--opt memory_budget_bytes=268435456"); writes benchmarks/memory.local.json (memory.json with SAVE=1)
bench-memory: $(STAMP)
	$(PY) benchmarks/memory.py $(if $(SAVE),--save) $(MEMORY_ARGS)

## soak: the long kill/resume run of tests/distributed (JSON report in soak_report.json)
soak: $(STAMP)
	ELASTIC_LOADER_SOAK_TRIALS=$${ELASTIC_LOADER_SOAK_TRIALS:-40} ELASTIC_LOADER_SOAK_REPORT=$${ELASTIC_LOADER_SOAK_REPORT:-soak_report.json} $(PY) -m pytest -q -p no:cacheprovider tests/distributed
