# hydra — build.  `make` builds the library and tools under build/;
# `make test` runs the test suite; `make SAN=1 test` does so under
# AddressSanitizer + UndefinedBehaviorSanitizer (objects in build/san/);
# `make CUDA=1` adds the CUDA backend (objects and binaries in build/cuda/,
# kernels for CUDA_ARCHS); `make CUDA=1 STAMPS=1` a profiling build whose
# decode kernels stamp their phases (build/cuda/stamps/, src/gpu/gpu_stamps.h);
# `make fuzz` builds the libFuzzer target (clang); `make install PREFIX=...`.

CC      ?= cc
PREFIX  ?= /usr/local
SAN     ?= 0
CUDA    ?= 0
STAMPS  ?= 0

BUILD := build
ifeq ($(CUDA),1)
BUILD := build/cuda
endif
ifeq ($(SAN),1)
BUILD := $(BUILD)/san
endif
# STAMPS=1 (with CUDA=1): a profiling build whose decode kernels stamp their
# phases (kernels/cuda/stamp.cuh, src/gpu/gpu_stamps.h).
ifeq ($(STAMPS),1)
BUILD := $(BUILD)/stamps
endif

# Messages are cut to their buffers on purpose: -Wno-format-truncation.
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -Wno-format-truncation -fPIC -fvisibility=hidden \
               -Iinclude -Isrc -DHYDRA_BUILD
SANFLAGS :=
ifeq ($(SAN),1)
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
endif
CFLAGS  += $(CFLAGS_BASE) $(SANFLAGS) -MMD -MP
LDFLAGS += $(SANFLAGS)
LDLIBS  += -lm -lpthread

LIB_SRC   := $(wildcard src/*.c kernels/cpu/*.c model/*.c)

# The CUDA backend: kernels/cuda/*.cu (nvcc) and its host side src/gpu/*.c;
# without CUDA=1, src/gpu/gpu_off.c reports that no device is available.
# CUDA_ARCHS: SM versions to build machine code for (Ampere, Ada, Hopper,
# Blackwell datacenter and consumer), plus PTX of the last for newer parts.
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCHS ?= 80 86 89 90 100 120
ifeq ($(CUDA),1)
LIB_SRC   += $(filter-out src/gpu/gpu_off.c,$(wildcard src/gpu/*.c))
CU_SRC    := $(wildcard kernels/cuda/*.cu)
CFLAGS    += -I$(CUDA_HOME)/include
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++ -ldl  # -ldl: NCCL loaded at run time (docs/DEPENDENCIES.md)
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
                -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))
NVCCFLAGS  := -std=c++17 -O2 -g -Xcompiler -fPIC,-fvisibility=hidden,-Wall -Werror all-warnings \
              -Iinclude -Isrc -DHYDRA_BUILD $(CUDA_GENCODE)
ifeq ($(STAMPS),1)
CFLAGS    += -DHYDRA_STAMPS
NVCCFLAGS += -DHYDRA_STAMPS
endif
else
LIB_SRC   += src/gpu/gpu_off.c
CU_SRC    :=
endif
RUN_SRC   := $(wildcard src/tools/*.c)
BENCH_SRC := $(filter-out bench/mkmodel.c,$(wildcard bench/*.c))
TOOL_SRC  := $(RUN_SRC) bench/mkmodel.c $(BENCH_SRC)
TEST_SRC  := $(filter-out tests/fuzz_%.c,$(wildcard tests/*.c))
SERVE_SRC := $(wildcard server/*.c)

LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(CU_SRC:%.cu=$(BUILD)/obj/%.o)
TEST_OBJ  := $(TEST_SRC:%.c=$(BUILD)/obj/%.o)

LIB_SO  := $(BUILD)/libhydra.so
LIB_A   := $(BUILD)/libhydra.a
TOOLS   := $(BUILD)/hydra-run $(BUILD)/hydra-mkmodel $(BUILD)/hydra-bench $(BUILD)/hydra-serve
TESTBIN := $(BUILD)/hydra-test

.PHONY: all run test fuzz install clean
all: $(LIB_SO) $(LIB_A) $(TOOLS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@

$(LIB_SO): $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,libhydra.so -o $@ $^ $(LDLIBS)

$(LIB_A): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# In-tree tools and tests link the static library: they may use internal
# headers (the GGUF writer, the type table) that the .so does not export.
$(BUILD)/hydra-run: $(RUN_SRC:%.c=$(BUILD)/obj/%.o) $(LIB_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/hydra-mkmodel: $(BUILD)/obj/bench/mkmodel.o $(LIB_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/hydra-bench: $(BENCH_SRC:%.c=$(BUILD)/obj/%.o) $(LIB_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The server reuses hydra-run's stop-string filter (src/tools/run_stop.c)
# and flag-table parser (src/tools/flag_parse.c).
$(BUILD)/hydra-serve: $(SERVE_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/src/tools/run_stop.o \
                      $(BUILD)/obj/src/tools/flag_parse.o $(LIB_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -luv -lhttp_parser -lcjson -lxxhash

$(TESTBIN): $(TEST_OBJ) $(LIB_A)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lcjson

$(BUILD)/obj/tests/%.o: CFLAGS += -Itests -DHYDRA_TEST_BUILD_DIR='"$(BUILD)"'

# The README's main job: hydra-run on the built-in default model.
run: all
	./$(BUILD)/hydra-run -p "Once upon a time" -n 32

test: all $(TESTBIN)
	./$(TESTBIN)

# libFuzzer needs clang; the target links the reader's sources directly.
FUZZ_CC    ?= clang
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Isrc -DHYDRA_BUILD \
              -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
fuzz: build/fuzz/fuzz-gguf
build/fuzz/fuzz-gguf: tests/fuzz_gguf.c $(LIB_SRC)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $^ -lm -lpthread

install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/hydra.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(TOOLS) $(DESTDIR)$(PREFIX)/bin/

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
