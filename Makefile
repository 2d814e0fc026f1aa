# reopt — the first commands are the contract (README): `make demo`, `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: bench-pruning bench-incremental bench-small-updates demo test fuzz lint venv clean bench-initial notebooks

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

bench-incremental: $(STAMP)
	$(BIN)/python benchmarks/incremental.py --repeat 5 --out benchmarks/results/incremental.md

bench-small-updates: $(STAMP)
	$(BIN)/python benchmarks/small_updates.py --repeat 7 --out benchmarks/results/small_updates.md

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

# The fuzz tests' long run (issue 22): every fuzz test with FUZZ_EXAMPLES examples (default
# 1000: 6 tests, 6,000 inputs) instead of its bounded count, an example over 60 s failing as
# a hang (tests/fuzzing.py). Niced: it takes minutes of CPU.
FUZZ_EXAMPLES ?= 1000
fuzz: $(STAMP)
	REOPT_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) nice -n 10 $(BIN)/python -m pytest -q -p no:cacheprovider \
		-k fuzz --hypothesis-show-statistics tests/test_hardening.py tests/test_rule_hardening.py

# JupyterLab on the repo's .venv, opened on notebooks/ (its kernel is this .venv's Python, so
# `import reopt` is the working tree). The front end is the `jupyter` extra, installed on first
# use: `make test` does not need it. As root (containers) it passes --allow-root. Extra flags:
# make notebooks JUPYTER_ARGS=--no-browser
notebooks: $(STAMP)
	@$(BIN)/python -c "import jupyterlab" 2>/dev/null || $(BIN)/pip install --quiet -e ".[jupyter]"
	$(BIN)/jupyter lab --notebook-dir=notebooks $$([ "$$(id -u)" = 0 ] && echo --allow-root) \
		$(JUPYTER_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .ruff_cache

# The paper's evaluation (Section 6, Appendix D) in one run: rewrites BENCHMARKS.md and the PNGs
# in benchmarks/results/ (about 16–20 minutes on 2 cores, most of it the Spark engine; the
# measured time is in BENCHMARKS.md's header).
# bench-quick is the smoke variant the test suite runs (python engine, into
# benchmarks/results/quick/, git-ignored): it checks that everything runs, not how fast.
.PHONY: bench bench-quick
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py --repeat 5

bench-quick: $(STAMP)
	$(BIN)/python benchmarks/run.py --quick
