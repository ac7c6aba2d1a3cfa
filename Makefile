# The README's two commands: `make run` (the main job) and `make test` (the whole test suite).
# Each installs its Debian packages first (scripts/bootstrap).
BUILD ?= build
JOBS  ?= 2

.PHONY: bootstrap build run test clean
bootstrap:
	@scripts/bootstrap

build: bootstrap
	@cmake -S . -B $(BUILD) -G Ninja >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/wren explore embla-1 nenya llama-3.1-8b

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

clean:
	rm -rf $(BUILD)
