# The two commands a newcomer needs (see README.md):
#   make run    set everything up, build, and start omnibus on the default model
#   make test   set everything up, build, and run every test
#   make bench-models   benchmark GGUFs of real model shapes (slow; see docs/performance.md)
.PHONY: run test setup build clean bench-models

MODEL ?= smollm2-135m

run: setup build
	./build/omnibus serve -m $(MODEL)

test: setup
	scripts/test.sh

setup:
	scripts/setup.sh

# Only what serving needs (the tests are built by `make test`).
build:
	scripts/build.sh release --target omnibus

# Random-weight GGUFs of real model shapes (Llama 3.2 1B, Llama 3.1 8B) for the benchmarks in
# docs/performance.md; needs the reference llama-quantize (scripts/build_llama_cpp.sh). Never run by
# `make test`. SHAPES="--shape qwen2.5-7b" (or qwen3-30b-a3b, the MoE layer shape) picks others.
bench-models: setup
	scripts/build_llama_cpp.sh >/dev/null
	.venv/bin/python tools/bench/make_shape_models.py $(SHAPES)

clean:
	rm -rf build build-asan build-tsan build-debug build-fuzz
