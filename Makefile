# The two commands a fresh machine needs: `make install`, then `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
PYTEST_ARGS ?=

.PHONY: install test lint typecheck bench clean

install:
	$(PIP) install -q -e '.[test]'
	-command -v pyenv >/dev/null 2>&1 && pyenv rehash
	@command -v trtconv >/dev/null && trtconv --version | head -1

test:
	$(PYTHON) -m ruff check trtconv tests benchmarks
	$(PYTHON) -m pytest $(PYTEST_ARGS)

lint:
	$(PYTHON) -m ruff check trtconv tests benchmarks

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache
