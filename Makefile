# The two commands a newcomer needs (see README.md):
#   make run    set everything up, build, and start omnibus on the default model
#   make test   set everything up, build, and run every test
.PHONY: run test setup build clean

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

clean:
	rm -rf build build-asan build-tsan build-debug build-fuzz
