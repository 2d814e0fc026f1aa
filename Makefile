# reopt — the first commands are the contract (README): `make demo`, `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: bench-pruning demo test lint venv clean bench-initial

# Create .venv at the repo root and install the package editable with its dev extras.
$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "reopt: $(PYTHON) not found (Python 3.11 is required)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	@touch $(STAMP)

venv: $(STAMP)

# The main job: TPC-H Q5 on SF1 statistics, best plan from each optimizer. Under the physical
# `io` model Q5 has 24 million plan trees: the declarative optimizer searches them with pruning
# (default --pruning all); under `cout` the exhaustive optimizer checks every optimizer.
demo: $(STAMP)
	$(BIN)/reopt optimize tpch:q5 --cost-model io --optimizer declarative,topdown,bottomup --engine python
	$(BIN)/reopt optimize tpch:q5 --cost-model cout --optimizer declarative,topdown,bottomup,exhaustive --engine python
	$(BIN)/reopt optimize tpch:q5 --cost-model cout --optimizer declarative --engine spark

bench-initial: $(STAMP)
	$(BIN)/python benchmarks/initial.py --repeat 5 --engines python,spark --out benchmarks/results/initial.md

bench-pruning: $(STAMP)
	$(BIN)/python benchmarks/pruning.py --repeat 5 --out benchmarks/results/pruning.md

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .ruff_cache
