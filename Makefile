# The README's two commands: `make run` (the main job: builds only the `wren` binary, which
# does not need libtorch, and generates) and `make test` (everything: the engine, wren-train
# and every test binary, the whole test suite, then the engine's suites again under
# AddressSanitizer and UndefinedBehaviorSanitizer; the libtorch trainer is left out of that
# build; then one aarch64 cross build run under qemu, scripts/test-aarch64: the kernels' tests
# and the C API's libwren.so with its example),
# then the explorer page in headless Chromium (scripts/test-browser) and the server driven by
# the openai npm client (scripts/test-serve). Before the browser step, the libFuzzer targets
# (tests/fuzz/, ten of them) run for 15 s each (scripts/test-fuzz; `make fuzz FUZZ_SECONDS=N` runs them
# longer). Each installs its Debian packages first (scripts/bootstrap; the aarch64, fuzz,
# browser and serve steps install their own).
BUILD ?= build
ASAN  ?= $(BUILD)-asan
JOBS  ?= 2

.PHONY: bootstrap build build-asan run test test-asan test-aarch64 test-serve fuzz clean
bootstrap:
	@scripts/bootstrap

build: bootstrap
	@cmake -S . -B $(BUILD) -G Ninja >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run:
	@scripts/bootstrap engine
	@cmake -S . -B $(BUILD) -G Ninja >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target wren
	$(BUILD)/wren generate -m models/embla-small "It was a dark and stormy night" -n 120 --temp 0.8 --seed 1 --stats

build-asan: bootstrap
	@cmake -S . -B $(ASAN) -G Ninja -DWREN_SANITIZE=ON -DWREN_TRAIN=OFF >/dev/null
	@cmake --build $(ASAN) -j $(JOBS)

test: build build-asan
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	cd $(ASAN) && ctest --output-on-failure -j $(JOBS)
	JOBS=$(JOBS) scripts/test-aarch64 $(BUILD)-aarch64 $(BUILD)/wren
	JOBS=$(JOBS) FUZZ_SECONDS=15 scripts/test-fuzz $(BUILD)-fuzz
	scripts/test-browser $(BUILD)/wren
	scripts/test-serve $(BUILD)/wren

test-asan: build-asan
	cd $(ASAN) && ctest --output-on-failure -j $(JOBS)

test-serve:
	@cmake -S . -B $(BUILD) -G Ninja >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target wren
	scripts/test-serve $(BUILD)/wren

test-aarch64:
	JOBS=$(JOBS) scripts/test-aarch64 $(BUILD)-aarch64 $(BUILD)/wren

# The fuzz targets (tests/fuzz/) for FUZZ_SECONDS each: make fuzz FUZZ_SECONDS=600
FUZZ_SECONDS ?= 60
fuzz:
	JOBS=$(JOBS) FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/test-fuzz $(BUILD)-fuzz

clean:
	rm -rf $(BUILD) $(ASAN) $(BUILD)-aarch64 $(BUILD)-fuzz
