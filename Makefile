# The two commands of the README:
#   make run    set everything up, start the default engine and open sparkcode
#   make test   set everything up and run the whole test suite
.PHONY: run test lint typecheck check setup bench

VENV ?= .venv
BIN := $(VENV)/bin

setup:
	@scripts/setup-env.sh

# Fetch (once, verified by sha256) the model of the machine's default CPU profile;
# if that fails the default stays cpu-demo, and the error says why.
run: setup
	@$(BIN)/sparkcode models fetch || echo "make run: continuing with cpu-demo" >&2
	$(BIN)/sparkcode

PYTEST_ARGS ?= --durations=25 -n 2 --dist loadgroup --no-loadscope-reorder

test: setup
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check sparkcode engine kernels tests bench scripts
	$(BIN)/ruff format --check sparkcode engine kernels tests bench scripts

typecheck: setup
	$(BIN)/mypy

check: lint typecheck test
