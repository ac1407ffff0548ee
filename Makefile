# Makefile: the two set-up commands (make demo, make test) and the C build.
#
#   make demo    create .venv, install torch and torchtpu, train the GPT example on tpu
#   make test    C tests (plain, then AddressSanitizer + UBSan) and the Python tests
#   make lib     the C core as build/<variant>/libtpu.a (setup.py calls this)
#   make ctest / make ctest-asan     the C tests alone
#
# The C core is C11 with -Wall -Wextra -Werror; the bridge is built by setup.py.

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
CC     ?= cc
JOBS   := $(shell nproc 2>/dev/null || echo 2)

CFLAGS_COMMON := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wshadow -Wvla \
                 -fPIC -pthread -Iinclude -Isrc
CFLAGS_release := -O2 -g
CFLAGS_asan    := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
                  -fno-sanitize-recover=undefined
LDLIBS := -pthread -lm

CORE_SRCS := $(sort $(wildcard src/*/*.c src/*/*/*.c))
TEST_SRCS := $(sort $(wildcard tests/c/test_*.c))

define variant_rules
build/$(1)/%.o: %.c $(wildcard include/tpu/*.h include/tpu/*.def src/*/*.h src/*/*/*.h) $(wildcard tests/c/*.h)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS_COMMON) $$(CFLAGS_$(1)) -c $$< -o $$@

build/$(1)/libtpu.a: $(CORE_SRCS:%.c=build/$(1)/%.o)
	@rm -f $$@
	ar rcs $$@ $$^

build/$(1)/tests/%: build/$(1)/tests/c/%.o build/$(1)/libtpu.a
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS_COMMON) $$(CFLAGS_$(1)) $$^ -o $$@ $$(LDLIBS)
endef
$(eval $(call variant_rules,release))
$(eval $(call variant_rules,asan))

TESTS_release := $(TEST_SRCS:tests/c/%.c=build/release/tests/%)
TESTS_asan    := $(TEST_SRCS:tests/c/%.c=build/asan/tests/%)

.PHONY: lib ctest ctest-asan venv test pytest demo bench clean
.SECONDARY:

lib: build/release/libtpu.a

# The test binaries compile in parallel (one job per core); the tests then run one by one.
ctest:
	@$(MAKE) --no-print-directory -j$(JOBS) $(TESTS_release)
	@$(PYTHON) tests/c/run_c_tests.py $(TESTS_release)

ctest-asan:
	@$(MAKE) --no-print-directory -j$(JOBS) $(TESTS_asan)
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(PYTHON) tests/c/run_c_tests.py $(TESTS_asan)

# The virtual environment: torch (CPU build, from the machine's local copy), test
# dependencies, and torchtpu installed editable (which builds libtpu.a and the bridge).
$(VENV)/.installed: requirements.txt setup.py pyproject.toml
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -r requirements.txt
	touch $@

# The bridge is rebuilt (setup.py, in place) when any C, C++ or header source changes.
BRIDGE_DEPS := setup.py $(CORE_SRCS) $(wildcard src/*/*.h src/*/*/*.h include/tpu/* torchtpu/csrc/*)
$(VENV)/.built: $(VENV)/.installed $(BRIDGE_DEPS)
	$(VPY) -m pip install --quiet --no-build-isolation --no-deps -e .
	touch $@

venv: $(VENV)/.built

# The C tests run while pip installs the venv's packages (unpacking wheels: about one core,
# two minutes on a fresh machine; its log is build/venv-install.log). The Python tests run
# in two processes (pytest-xdist): many wait on subprocesses or on the kernel thread, so two
# share this 2-core machine well (about 370 s instead of 490 s).
test:
	@mkdir -p build
	@$(MAKE) --no-print-directory $(VENV)/.installed > build/venv-install.log 2>&1 & \
	  pip_pid=$$!; \
	  $(MAKE) --no-print-directory ctest ctest-asan; c_status=$$?; \
	  wait $$pip_pid; pip_status=$$?; \
	  if [ $$pip_status -ne 0 ]; then cat build/venv-install.log; fi; \
	  [ $$c_status -eq 0 ] && [ $$pip_status -eq 0 ]
	@$(MAKE) --no-print-directory venv
	$(VPY) -m pytest -q -n 2 tests/python

pytest: venv
	$(VPY) -m pytest -q -n 2 tests/python

demo: venv
	$(VPY) examples/train_gpt.py

bench: venv
	$(VPY) bench/run_all.py

clean:
	rm -rf build torchtpu/*.so
