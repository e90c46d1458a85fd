# The two commands of the README:
#   make run    set everything up, start the default engine and open sparkcode
#   make test   set everything up and run the whole test suite
.PHONY: run test lint typecheck check setup bench

VENV ?= .venv
BIN := $(VENV)/bin

setup:
	@scripts/setup-env.sh

run: setup
	$(BIN)/sparkcode

PYTEST_ARGS ?= --durations=25

test: setup
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check sparkcode engine kernels tests bench

typecheck: setup
	$(BIN)/mypy

check: lint typecheck test
