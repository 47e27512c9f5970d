# train_gpt build. `make` builds ./train_gpt (nvcc when installed, else g++ alone),
# `make run` trains the default config, `make test` runs the test suite,
# `make bench` prints the benchmark table, `make cost-model` the GPU cost model's
# (docs/gpu.md). SAN=1 builds with ASan+UBSan (g++ only).
# `make fuzz` builds the libFuzzer targets (clang++), `make fuzz-run` runs them.
#
# Variables: NO_MPI=1 builds without OpenMPI; NO_BLAS=1 builds without OpenBLAS (the CPU
# matmuls use src/backends/cpu/gemm.cpp's own loop nest); EXTRA_CFLAGS adds flags to every compile
# (scripts/gpu/gpu_deps.sh + EXTRA_CFLAGS=-I.deps/include for a machine without the header
# packages); SKIP_SETUP=1 never runs scripts/setup.sh (no package registry). A build with
# NO_MPI or NO_BLAS goes to its own folder, build/<variant>/, binary included.
# CUDA=1 (CI and the GPU scripts set it), or a machine where `nvidia-smi -L` lists a GPU, builds
# src/backends/cuda/*.cu (the CUDA backend) with nvcc into libtrain_gpt_cuda.so beside the
# binary, which train_gpt opens only when a run asks for a GPU (src/backends/cuda_library.h), and
# links it with tests/cuda/*.cu into the test binary; otherwise (no GPU, CUDA=0, no nvcc or SAN=1)
# neither is built and train_gpt runs on the CPU only: nvcc's three arches take minutes that a
# machine without a GPU has no use for. With the CUDA toolkit's headers, `make test` also
# builds and runs the emulated kernel tests (build/<variant>/kernels_emulated, ASan+UBSan under
# SAN=1) and, but under SAN=1, the checked kernel tests (kernels_checked: racecheck, memcheck,
# initcheck of every launcher).

CXX      ?= g++
# WERROR=1 turns warnings into errors (CI builds so, .ci/run); a user's build, perhaps with a
# newer compiler that warns about more, warns and builds.
WERROR   ?=
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
# CUDA=1 builds the CUDA backend, CUDA=0 never; unset, only where a GPU is present.
ifeq ($(origin CUDA),undefined)
  CUDA := $(if $(shell nvidia-smi -L 2>/dev/null | grep '^GPU'),1,0)
endif
SAN      ?=
THREADS  ?= 0
EXTRA_CFLAGS ?=

VARIANT  := $(if $(filter 1,$(NO_MPI)),-nompi)$(if $(filter 1,$(NO_BLAS)),-noblas)

# One tuning for every x86-64 machine: -march=native picks the instruction sets, but GCC's
# tuning for the CPU it finds also picks how serial float loops are vectorised, and so how
# their sums round. Fixed, the same source computes the same bits on every machine with the
# same instruction sets. The regression fixtures (tests/fixtures/regression_losses.json), and
# the lanes of src/backends/cpu/attention.cpp, which must equal its reference loops' compiled code bit
# for bit, were recorded on an AMD EPYC; on a Xeon, which GCC 12.2 tunes for as rocketlake,
# both match with znver3's tuning and not with its own. There it is no slower (toy bf16 step
# 8.9 against 9.7 ms).
TUNE     := $(if $(filter x86_64,$(shell uname -m)),-mtune=znver3)

ifeq ($(SAN),1)
  BUILD    := build/san$(VARIANT)
  BIN      := $(BUILD)/train_gpt
  # GCC 12 reports false maybe-uninitialized warnings inside <regex> under the sanitizers.
  OPT      := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
  LDSAN    := -fsanitize=address,undefined
  USE_NVCC :=
else
  BUILD    := build/rel$(VARIANT)
  BIN      := $(if $(VARIANT),$(BUILD)/train_gpt,train_gpt)
  OPT      := -O3 -march=native $(TUNE) -g
  LDSAN    :=
  USE_NVCC := $(if $(filter 1,$(CUDA)),$(NVCC))
endif

# OpenMPI from Debian (scripts/setup.sh installs it); NO_MPI=1 builds without it.
ARCH     := $(shell gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
ifeq ($(NO_MPI),1)
  MPI_FLAGS := -DTG_NO_MPI
  # src/comm/comm.cpp leaves launched_by_mpi() unused without MPI (g++ only; nvcc lacks the flag).
  MPI_WARN  := -Wno-unused-function
  MPI_LIBS  :=
else
  MPI_FLAGS := -I/usr/lib/$(ARCH)/openmpi/include
  MPI_WARN  :=
  MPI_LIBS  := -L/usr/lib/$(ARCH)/openmpi/lib -lmpi
endif

# OpenBLAS from its own folders (Debian's libopenblas-pthread-dev), whatever the
# alternatives make cblas.h and libblas.so point to: netlib's libblas-dev provides a
# cblas.h without openblas_set_num_threads.
OPENBLAS_VARIANT ?= openblas-pthread
OPENBLAS_INC := /usr/include/$(ARCH)/$(OPENBLAS_VARIANT)
OPENBLAS_LIB := /usr/lib/$(ARCH)/$(OPENBLAS_VARIANT)
ifeq ($(NO_BLAS),1)
  BLAS_FLAGS := -DTG_NO_BLAS
  BLAS_LIBS  :=
else
  BLAS_FLAGS := -isystem $(OPENBLAS_INC)
  BLAS_LIBS  := -L$(OPENBLAS_LIB) -Xlinker -rpath=$(OPENBLAS_LIB) -lopenblas
endif

# The toolkit's folder, whether or not the CUDA backend is built (the emulated tests read its headers).
CUDA_HOME  := $(patsubst %/bin/nvcc,%,$(NVCC))
WERR       := $(if $(filter 1,$(WERROR)),-Werror)
NVWERR     := $(if $(filter 1,$(WERROR)),-Werror all-warnings -Xcompiler -Werror)
CUDA_FLAGS := $(if $(USE_NVCC),-DTG_CUDA)
CXXFLAGS := -std=c++17 $(OPT) -fopenmp -Wall -Wextra $(WERR) -MMD -MP -I. $(MPI_FLAGS) $(MPI_WARN) $(BLAS_FLAGS) $(CUDA_FLAGS) $(EXTRA_CFLAGS)
# PCRE2 (the GPT-2 tokenizer's pattern, libpcre2-dev) and libcrypto (SHA-256, libssl-dev):
# Debian's, or the copies scripts/gpu/gpu_deps.sh puts in .deps/lib for a machine without them.
TOK_LIBS := $(if $(wildcard .deps/lib/libpcre2-8.so),-L$(CURDIR)/.deps/lib -Xlinker -rpath=$(CURDIR)/.deps/lib) -lpcre2-8 -lcrypto
LDLIBS   := $(BLAS_LIBS) $(MPI_LIBS) $(TOK_LIBS) -lgomp -lpthread -lm -ldl
CUDA_ARCHS := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_100,code=sm_100
NVCCFLAGS  := -std=c++17 -O3 $(CUDA_ARCHS) $(NVWERR) -Xcompiler -fopenmp,-Wall,-Wextra -I. $(MPI_FLAGS) $(BLAS_FLAGS) $(CUDA_FLAGS) $(EXTRA_CFLAGS)
CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -Xlinker -rpath,$(CUDA_HOME)/lib64:$(CUDA_HOME)/lib -lcublasLt -lcublas -lcudart

# NCCL (src/backends/cuda/nccl_comm.cu) when its header is found in NCCL_HOME (default: the CUDA
# toolkit); NO_NCCL=1 leaves it out, and multi-GPU runs then say the binary lacks NCCL.
# libnccl itself is not linked: nccl_comm.cu opens libnccl.so.2 when a multi-GPU job makes
# its communicator (one GPU needs none), searching NCCL_HOME's lib folders (the rpath) first.
NCCL_HOME  ?= $(CUDA_HOME)
HAVE_NCCL  := $(if $(filter 1,$(NO_NCCL) $(SAN)),,$(if $(NVCC),$(wildcard $(NCCL_HOME)/include/nccl.h)))
ifneq ($(HAVE_NCCL),)
  CXXFLAGS   += -DTG_NCCL
  NVCCFLAGS  += -DTG_NCCL -I$(NCCL_HOME)/include
  CUDA_LIBS  += -Xlinker -rpath,$(NCCL_HOME)/lib:$(NCCL_HOME)/lib64
endif

# cuDNN's fused attention (src/backends/cuda/attention_cudnn.cu, cuda.attention=cudnn|auto): built
# in (-DTG_CUDNN on that file alone) when the header-only cudnn-frontend is found in
# CUDNN_FRONTEND_INC (scripts/gpu/gpu_deps.sh puts its pinned 1.32.0 in .deps/include) and
# cudnn.h in the toolkit or beside it; NO_CUDNN=1 leaves it out. libcudnn is never linked: the
# file opens libcudnn.so.9 with dlopen when a run first asks for it. The CPU build, and CI's
# CUDA build without the headers, compile the file without TG_CUDNN (it then says so).
CUDNN_FRONTEND_INC ?= .deps/include
HAVE_CUDNN := $(if $(filter 1,$(NO_CUDNN) $(SAN)),,$(if $(USE_NVCC),$(if $(wildcard $(CUDNN_FRONTEND_INC)/cudnn_frontend.h),$(firstword $(wildcard $(CUDA_HOME)/include/cudnn.h $(CUDNN_FRONTEND_INC)/cudnn.h)))))
CUDNN_FLAGS := $(if $(HAVE_CUDNN),-DTG_CUDNN -DNV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING -isystem $(CUDNN_FRONTEND_INC) -isystem $(dir $(HAVE_CUDNN)))
SRC      := $(wildcard src/*/*.cpp src/backends/cpu/*.cpp)
OBJ      := $(SRC:%.cpp=$(BUILD)/%.o)
# tests/fuzz/fuzz_entries.cpp: the fuzz targets' bodies, also run by test_fuzz_regressions.cpp.
TEST_SRC := $(wildcard tests/*.cpp) $(filter-out tests/cuda/% tests/fuzz/%,$(wildcard tests/*/*.cpp)) tests/fuzz/fuzz_entries.cpp
TEST_OBJ := $(TEST_SRC:%.cpp=$(BUILD)/%.o)
ifneq ($(USE_NVCC),)
  CU_SRC      := $(if $(HAVE_NCCL),$(wildcard src/backends/cuda/*.cu),$(filter-out src/backends/cuda/nccl_comm.cu,$(wildcard src/backends/cuda/*.cu)))
  CU_OBJ      := $(patsubst %.cu,$(BUILD)/%.o,$(CU_SRC))
  TEST_CU_OBJ := $(patsubst %.cu,$(BUILD)/%.o,$(wildcard tests/cuda/*.cu))
  CUDA_LIB    := $(dir $(BIN))libtrain_gpt_cuda.so
else
  CU_OBJ      :=
  TEST_CU_OBJ :=
  CUDA_LIB    :=
endif

.PHONY: all deps run test bench docs clean format gpu-check cost-model fuzz fuzz-run fuzz-seeds
all: $(BIN)

deps:
ifneq ($(SKIP_SETUP),1)
	@scripts/setup.sh
endif

$(BUILD)/%.o: %.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

# glibc's tanhf rounds every product on its own, and src/backends/cpu/tanh_fp32.cpp must round as it does.
$(BUILD)/src/backends/cpu/tanh_fp32.o: CXXFLAGS += -ffp-contract=off

# src/backends/cpu/attention.cpp spells out each fused multiply-add its reference's compiled code makes, and
# src/backends/cpu/exp_fp32.cpp each one glibc's expf makes.
$(BUILD)/src/backends/cpu/attention.o: CXXFLAGS += -ffp-contract=off
$(BUILD)/src/backends/cpu/exp_fp32.o: CXXFLAGS += -ffp-contract=off

# src/backends/cuda_library.cpp is the one object whose code CUDA= changes (TG_CUDA): a stamp
# named after the setting makes a switch between `make` and `make CUDA=1` recompile it.
CUDA_STAMP := $(BUILD)/.cuda-$(if $(USE_NVCC),on,off)
$(CUDA_STAMP): | deps
	@mkdir -p $(dir $@) && rm -f $(BUILD)/.cuda-on $(BUILD)/.cuda-off && touch $@
$(BUILD)/src/backends/cuda_library.o: $(CUDA_STAMP)
# The same for the cuDNN file: finding (or losing) the frontend's headers recompiles it.
CUDNN_STAMP := $(BUILD)/.cudnn-$(if $(HAVE_CUDNN),on,off)
$(CUDNN_STAMP): | deps
	@mkdir -p $(dir $@) && rm -f $(BUILD)/.cudnn-on $(BUILD)/.cudnn-off && touch $@
$(BUILD)/src/backends/cuda/attention_cudnn.o: NVCCFLAGS += $(CUDNN_FLAGS)
$(BUILD)/src/backends/cuda/attention_cudnn.o: $(CUDNN_STAMP)

$(BUILD)/train_gpt.o: train_gpt.cu | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -x c++ -c $< -o $@
ifneq ($(USE_NVCC),)
# -fPIC: the backend's objects go into the shared library as well as the test binary.
$(BUILD)/src/backends/cuda/%.o: src/backends/cuda/%.cu | deps
	@mkdir -p $(dir $@)
	$(USE_NVCC) $(NVCCFLAGS) -Xcompiler -fPIC -MMD -MP -c $< -o $@
$(BUILD)/tests/cuda/%.o: tests/cuda/%.cu | deps
	@mkdir -p $(dir $@)
	$(USE_NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@
# The library leaves the host code it calls undefined: train_gpt exports its own (-rdynamic).
$(CUDA_LIB): $(CU_OBJ)
	$(USE_NVCC) -shared $(CUDA_ARCHS) -o $@ $^ -Xcompiler -fopenmp $(CUDA_LIBS)
$(BIN): $(BUILD)/train_gpt.o $(OBJ) $(CUDA_LIB)
	$(CXX) $(OPT) -rdynamic -fopenmp -o $@ $(filter %.o,$^) $(LDLIBS)
$(BUILD)/run_tests: $(TEST_OBJ) $(TEST_CU_OBJ) $(OBJ) $(CU_OBJ)
	$(USE_NVCC) $(CUDA_ARCHS) -o $@ $^ -Xcompiler -fopenmp $(LDLIBS) $(CUDA_LIBS)
else
# A library left by an earlier CUDA=1 build goes: this binary would never open it.
$(BIN): $(BUILD)/train_gpt.o $(OBJ)
	@rm -f $(dir $@)libtrain_gpt_cuda.so
	$(CXX) $(OPT) $(LDSAN) -fopenmp -o $@ $^ $(LDLIBS)
$(BUILD)/run_tests: $(TEST_OBJ) $(OBJ)
	$(CXX) $(OPT) $(LDSAN) -fopenmp -o $@ $^ $(LDLIBS)
endif

# The CUDA backend (src/backends/cuda/*.cu but the library entry; NCCL's communicator when its header
# is found) and its kernels run on the CPU with CUDA threads emulated as fibers
# (tests/cuda/cuda_emulation.h, passed with -include; the runtime, cuBLAS, cuBLASLt and NCCL as
# host stand-ins, tests/cuda/*_emulation.cpp; needs the CUDA headers; C++20), compared with the
# CPU backend (linked from its objects): one binary of tests/cuda/*_emulated.cpp and the GPU
# tests tests/cuda/test_*.cu. The NCCL stand-ins are exported (--export-dynamic-symbol), so that
# nccl_comm.cu's loader finds them as it would find a loaded libnccl.
# Built wherever the CUDA toolkit's headers are (nvcc found), SAN=1 included: then with ASan
# and UBSan like the rest of that build (the fibers tell ASan of their stack switches, device
# memory's red zones and freed blocks are poisoned: tests/cuda/memory_check.h).
# -U_FORTIFY_SOURCE: the fibers switch stacks with _longjmp; -fno-strict-aliasing: the
# kernels' 16-byte packs are type-punned through int4, as nvcc allows; -march=native as the
# CPU objects it links (src/backends/cpu/storage.h's inline fp16 conversions use F16C there; a SAN=1
# build has neither). -Wno-unused-function: a launcher includes static kernels it does not
# launch; -fno-extern-tls-init: the dynamic shared memory is an extern thread_local array that
# needs no initialisation (GCC would call a missing init function through a null pointer).
ifneq ($(NVCC),)
EMU_CUDA    := $(patsubst %/bin/nvcc,%,$(NVCC))
EMU_OPT     := $(if $(filter 1,$(SAN)),$(OPT),-O2 -march=native)
KERNELS_EMU := $(BUILD)/kernels_emulated
EMU_DIR     := $(BUILD)/emu
EMU_FLAGS   := -std=c++20 $(EMU_OPT) -U_FORTIFY_SOURCE -fno-strict-aliasing -pthread -fopenmp \
               -Wall -Wextra $(WERR) -Wno-unknown-pragmas -Wno-unused-function -fno-extern-tls-init -MMD -MP -I. -I$(EMU_CUDA)/include \
               $(MPI_FLAGS) $(BLAS_FLAGS) $(CUDA_FLAGS) $(EXTRA_CFLAGS) -include tests/cuda/cuda_emulation.h \
               $(if $(HAVE_NCCL),-DTG_NCCL -I$(NCCL_HOME)/include)
EMU_CU      := $(filter-out src/backends/cuda/library.cu $(if $(HAVE_NCCL),,src/backends/cuda/nccl_comm.cu),$(wildcard src/backends/cuda/*.cu)) \
               $(if $(HAVE_NCCL),$(wildcard tests/cuda/test_*.cu),$(filter-out tests/cuda/test_nccl.cu,$(wildcard tests/cuda/test_*.cu)))
EMU_SUPPORT := tests/cuda/cuda_emulation.cpp tests/cuda/cublaslt_emulation.cpp \
               tests/cuda/runtime_emulation.cpp tests/cuda/stream_emulation.cpp \
               tests/cuda/device_memory_emulation.cpp tests/cuda/memory_check.cpp tests/cuda/traffic.cpp \
               tests/cuda/symbols_emulation.cpp tests/cuda/fibers_emulation.cpp \
               $(if $(HAVE_NCCL),tests/cuda/nccl_emulation.cpp)
EMU_SRC     := $(filter-out $(if $(HAVE_NCCL),,tests/cuda/nccl_emulated.cpp),$(wildcard tests/cuda/*_emulated.cpp)) $(EMU_SUPPORT)
EMU_OBJ     := $(EMU_CU:%.cu=$(EMU_DIR)/%.o) $(EMU_SRC:%.cpp=$(EMU_DIR)/%.o)
KERNELS_EMU_OBJ := $(OBJ) $(BUILD)/tests/test_util.o
$(EMU_DIR)/%.o: %.cu | deps
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) -x c++ -c $< -o $@
$(EMU_DIR)/%.o: %.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_FLAGS) -c $< -o $@
$(KERNELS_EMU): $(EMU_OBJ) $(KERNELS_EMU_OBJ)
	$(CXX) $(LDSAN) -pthread -o $@ $^ -fopenmp '-Wl,--export-dynamic-symbol=nccl*' $(LDLIBS)

# kernels_checked: every launcher of src/backends/cuda/*.cu (but NCCL's and the library entry) and the
# cuBLAS(Lt) stand-ins compiled with GCC's -fsanitize=thread instrumentation, but linked with
# tests/cuda/memory_check.cpp's own __tsan_* functions instead of libtsan: racecheck, memcheck
# and initcheck of every load and store they make (tests/cuda/memory_check.h), and the cost
# model's traffic counts (tests/cuda/traffic.h), run by tests/cuda/*_checked.cpp on small shapes. The instrumentation is kept out of
# kernels_emulated, whose larger shapes it would slow down several times over; the
# support files that define the callbacks are not instrumented (they are the callbacks).
# Not in SAN=1 builds: an object takes either ASan's instrumentation or this one.
ifneq ($(SAN),1)
KERNELS_CHECKED := $(BUILD)/kernels_checked
CHECK_DIR   := $(BUILD)/checked
# -g: the reports name source lines.
CHECK_FLAGS := $(EMU_FLAGS) -g -fsanitize=thread --param=tsan-instrument-func-entry-exit=0
CHECK_SRC   := $(wildcard tests/cuda/*_checked.cpp) tests/cuda/cuda_emulation.cpp \
               tests/cuda/cublaslt_emulation.cpp tests/cuda/cost_report.cpp
CHECK_OBJ   := $(patsubst %.cu,$(CHECK_DIR)/%.o,$(filter-out src/backends/cuda/nccl_comm.cu,$(filter src/backends/cuda/%,$(EMU_CU)))) \
               $(CHECK_SRC:%.cpp=$(CHECK_DIR)/%.o)
CHECK_PLAIN := $(addprefix $(EMU_DIR)/tests/cuda/,runtime_emulation.o stream_emulation.o device_memory_emulation.o \
               memory_check.o traffic.o symbols_emulation.o fibers_emulation.o)
$(CHECK_DIR)/%.o: %.cu | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CHECK_FLAGS) -x c++ -c $< -o $@
$(CHECK_DIR)/%.o: %.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CHECK_FLAGS) -c $< -o $@
$(KERNELS_CHECKED): $(CHECK_OBJ) $(CHECK_PLAIN) $(KERNELS_EMU_OBJ)
	$(CXX) -pthread -o $@ $^ -fopenmp $(LDLIBS)
endif
endif

# What `make test` runs of kernels_emulated: everything, or under SAN=1 (ASan slows the
# fibers' kernels several times over) the kernel-level cases of tests/cuda/*_emulated.cpp,
# without the backend-level GPU tests of tests/cuda/test_*.cu.
EMU_TEST_ARGS := --minimal $(if $(filter 1,$(SAN)),--source-file='*_emulated.cpp')

# The test binary prints its own closing line "N passed, N failed" (last).
test: $(BUILD)/run_tests $(BIN) $(KERNELS_EMU) $(KERNELS_CHECKED)
	@$(if $(KERNELS_EMU),OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(KERNELS_EMU) $(EMU_TEST_ARGS) &&) $(if $(KERNELS_CHECKED),$(KERNELS_CHECKED) --minimal &&) TG_BIN=$(CURDIR)/$(BIN) OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(BUILD)/run_tests

# The GPU cost model (tests/cuda/cost_model_checked.cpp, docs/gpu.md "The cost model"): the
# memory-bound kernels' traffic against their minimum, the GEMMs, the launches per step and a
# predicted time per op at GPT-2 124M, written to $(BUILD)/cost_model.md and .csv.
cost-model: $(KERNELS_CHECKED)
	@$(if $(KERNELS_CHECKED),,echo "cost-model: needs the CUDA toolkit's headers (nvcc) and no SAN=1" && false)
	$(KERNELS_CHECKED) --test-case='cost model:*' && cat $(BUILD)/cost_model.md

run: train_gpt
	@grep -qs '"record_len": 16' data/toy/meta.json || ./train_gpt prepare toy --out data/toy
	./train_gpt train --config configs/default.json --train.threads=$(THREADS)

bench: $(BIN)
	./$(BIN) bench --threads=$(THREADS)

# The manual's tables generated from the code (config keys, config files; src/cli/docs.h).
docs: $(BIN)
	./$(BIN) docs

# The one command for a machine with a GPU (build, CUDA tests, parity, benchmark).
gpu-check:
	bash scripts/gpu/gpu_check.sh

# libFuzzer targets for the readers of untrusted files (tests/fuzz/: shards, model files,
# checkpoints, configs, Hugging Face directories), built by clang++ with ASan+UBSan into
# build/fuzz/fuzz_<target> from only the sources those readers need (no MPI, no BLAS, no
# CUDA). `make fuzz-run
# FUZZ_SECONDS=600` runs each target in turn on its corpus (scripts/fuzz.sh); `make
# fuzz-seeds` rewrites the seed corpora tests/fuzz/corpus/ from the project's own writers.
FUZZ_CXX     ?= clang++
FUZZ_DIR     := build/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_FLAGS   := -std=c++17 -O1 -g -fno-omit-frame-pointer $(FUZZ_SAN) -Wall -Wextra \
                -Wno-unknown-pragmas -MMD -MP -I. -DTG_NO_MPI -DTG_NO_BLAS $(EXTRA_CFLAGS)
FUZZ_TARGETS := shard model_file checkpoint config hf_model bpe
FUZZ_LIB_SRC := src/base/common.cpp src/base/fileio.cpp src/base/sha256.cpp src/base/suggest.cpp \
                src/base/host_memory.cpp src/base/test_hooks.cpp src/data/data.cpp \
                src/io/safetensors.cpp src/data/bpe.cpp src/data/tokenizer.cpp src/data/prepare.cpp \
                src/numerics/recipe.cpp src/numerics/precision_mode.cpp src/numerics/state_format.cpp \
                src/numerics/master_format.cpp src/numerics/wire_format.cpp \
                src/config/config.cpp src/config/config_read.cpp src/config/config_cli.cpp \
                src/config/config_validate.cpp \
                src/config/config_text.cpp src/config/presets.cpp \
                src/config/key_aliases.cpp src/data/bpe_long_piece.cpp src/backends/backend.cpp \
                src/backends/attention_choice.cpp \
                src/io/checkpoint_cleanup.cpp src/comm/comm.cpp src/comm/rendezvous.cpp \
                src/comm/rendezvous_secret.cpp \
                src/model/model.cpp src/model/model_plan.cpp src/model/model_params.cpp \
                src/model/model_grads.cpp src/model/linear_quantizers.cpp src/model/quantized_linear.cpp \
                src/io/checkpoint.cpp src/io/model_file.cpp src/io/optim_file.cpp \
                src/io/run_state.cpp src/io/hf.cpp \
                tests/fuzz/fuzz_entries.cpp
FUZZ_LIB_OBJ := $(FUZZ_LIB_SRC:%.cpp=$(FUZZ_DIR)/%.o)
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz_%)
FUZZ_SECONDS ?= 60

$(FUZZ_DIR)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_DIR)/fuzz_%: $(FUZZ_DIR)/tests/fuzz/fuzz_%.o $(FUZZ_LIB_OBJ)
	$(FUZZ_CXX) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(TOK_LIBS)
$(FUZZ_DIR)/make_seeds: $(FUZZ_DIR)/tests/fuzz/make_seeds.o $(FUZZ_LIB_OBJ)
	$(FUZZ_CXX) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -o $@ $^ $(TOK_LIBS)

# The targets' own objects are kept (they are intermediates of a pattern chain).
.SECONDARY: $(FUZZ_TARGETS:%=$(FUZZ_DIR)/tests/fuzz/fuzz_%.o) $(FUZZ_DIR)/tests/fuzz/make_seeds.o
fuzz: $(FUZZ_BINS)

fuzz-run: fuzz
	scripts/fuzz.sh $(FUZZ_SECONDS)

fuzz-seeds: $(FUZZ_DIR)/make_seeds
	$(FUZZ_DIR)/make_seeds

format:
	clang-format -i train_gpt.cu src/*/*.h src/*/*.cpp src/backends/cpu/*.h src/backends/cpu/*.cpp tests/*.cpp tests/*.h tests/*/*.cpp tests/fuzz/*.cpp tests/fuzz/*.h \
	  src/backends/cuda/*.h src/backends/cuda/*.cu kernels/*.cuh tests/cuda/*.cu tests/cuda/*.h tests/cuda/*.cpp

clean:
	rm -rf build train_gpt libtrain_gpt_cuda.so

-include $(OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(EMU_OBJ:.o=.d) $(CHECK_OBJ:.o=.d) $(wildcard $(FUZZ_DIR)/*/*.d $(FUZZ_DIR)/*/*/*.d) $(CU_OBJ:.o=.d) $(TEST_CU_OBJ:.o=.d) $(BUILD)/train_gpt.d
