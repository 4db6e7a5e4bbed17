# The two commands a fresh machine needs: `make install`, then `make test`.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
PYTEST_ARGS ?=

.PHONY: install test lint typecheck bench clean stubs typecheck-trt fuzz

# On a machine with an NVIDIA GPU the `gpu` extra too, so the GPU tests run instead of skipping.
EXTRAS ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo test,gpu || echo test)

install:
	$(PIP) install -q -e '.[$(EXTRAS)]'
	-command -v pyenv >/dev/null 2>&1 && pyenv rehash
	@command -v trtconv >/dev/null && trtconv --version | head -1

# Two pytest workers where pytest-xdist is installed (the test extra), each taking whole files (--dist loadfile:
# a module's fixtures are set up once); PYTEST_WORKERS=0 runs in one process (docs/benchmarks.md, "`make test` time").
PYTEST_WORKERS ?= 2
HAS_XDIST = $(if $(filter-out 0,$(PYTEST_WORKERS)),$(shell $(PYTHON) -c "import xdist" 2>/dev/null && echo yes))
PYTEST_XDIST = $(if $(HAS_XDIST),-n $(PYTEST_WORKERS) --dist loadfile)

test: typecheck-trt
	$(PYTHON) -m ruff check trtconv tests benchmarks tools
	$(PYTHON) -m pytest --durations=25 $(PYTEST_XDIST) $(PYTEST_ARGS)  # the slowest 25 end CI's output: growth is seen

lint:
	$(PYTHON) -m ruff check trtconv tests benchmarks tools

# TensorRT type stubs, generated from NVIDIA's bindings wheels (PyPI) into an ignored cache.
TRT_STUBS ?= .cache/trt-stubs
TRT_STUB_VERSIONS ?= 10.16 11.4 rtx

stubs:
	$(PYTHON) tools/trt_stubs/generate.py --out $(TRT_STUBS)

# trtconv/trt against each TensorRT version's real API (docs/build.md, "Type-checking").
typecheck-trt: stubs
	@for v in $(TRT_STUB_VERSIONS); do \
	  echo "mypy trtconv/trt against TensorRT $$v"; \
	  if [ $$v = rtx ]; then api=--always-true=RTX_API; else api=--always-false=RTX_API; fi; \
	  MYPYPATH=$(TRT_STUBS)/$$v $(PYTHON) -m mypy --config-file tools/trt_stubs/mypy.ini $$api \
	    --cache-dir .mypy_cache/trt-$$v trtconv/trt || exit 1; \
	done

# 1000 mutated real models, each through check, rewrite, quantize and build (docs/reliability.md); ~5 min.
FUZZ_CASES ?= 1000
fuzz:
	$(PYTHON) tests/fuzz/run.py --cases $(FUZZ_CASES) --json .cache/fuzz-report.json

# The DCNv2 plugin's PTX (package data) from plugins/dcnv2/dcnv2.cu (compute_80) and dcnv2_sm90.cu (compute_90a);
# tests/trt/test_dcnv2_build.py checks both are current.
.PHONY: dcnv2-ptx
dcnv2-ptx:
	$(PYTHON) plugins/dcnv2/build_ptx.py

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache
