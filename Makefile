# train_gpt build. `make` builds ./train_gpt (nvcc when installed, else g++ alone),
# `make run` trains the default config, `make test` runs the test suite,
# `make bench` prints the benchmark table. SAN=1 builds with ASan+UBSan (g++ only).

CXX      ?= g++
NVCC     ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
SAN      ?=
THREADS  ?= 0
EXTRA_CFLAGS ?=

ifeq ($(SAN),1)
  BUILD    := build/san
  BIN      := build/san/train_gpt
  # GCC 12 reports false maybe-uninitialized warnings inside <regex> under the sanitizers.
  OPT      := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -Wno-maybe-uninitialized
  LDSAN    := -fsanitize=address,undefined
  USE_NVCC :=
else
  BUILD    := build/rel
  BIN      := train_gpt
  OPT      := -O3 -march=native -g
  LDSAN    :=
  USE_NVCC := $(NVCC)
endif

# OpenMPI from Debian (scripts/setup.sh installs it); NO_MPI=1 builds without it.
ARCH     := $(shell gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
ifeq ($(NO_MPI),1)
  MPI_FLAGS := -DTG_NO_MPI
  MPI_LIBS  :=
else
  MPI_FLAGS := -I/usr/lib/$(ARCH)/openmpi/include
  MPI_LIBS  := -L/usr/lib/$(ARCH)/openmpi/lib -lmpi
endif

CXXFLAGS := -std=c++17 $(OPT) -fopenmp -Wall -Wextra -Werror -MMD -MP -I. $(MPI_FLAGS) $(EXTRA_CFLAGS)
LDLIBS   := -lopenblas $(MPI_LIBS) -lgomp -lpthread -lm
CUDA_ARCHS := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NVCCFLAGS  := -std=c++17 -O3 $(CUDA_ARCHS) -Werror all-warnings -Xcompiler -fopenmp,-Wall,-Wextra,-Werror -I. $(EXTRA_CFLAGS)

SRC      := $(wildcard src/*.cpp src/cpu/*.cpp)
OBJ      := $(SRC:%.cpp=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/*.cpp)
TEST_OBJ := $(TEST_SRC:%.cpp=$(BUILD)/%.o)

.PHONY: all deps run test bench clean format
all: $(BIN)

deps:
	@scripts/setup.sh

$(BUILD)/%.o: %.cpp | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

ifneq ($(USE_NVCC),)
$(BUILD)/train_gpt.o: train_gpt.cu | deps
	@mkdir -p $(dir $@)
	$(USE_NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@
$(BIN): $(BUILD)/train_gpt.o $(OBJ)
	$(USE_NVCC) $(CUDA_ARCHS) -o $@ $^ $(LDLIBS)
else
$(BUILD)/train_gpt.o: train_gpt.cu | deps
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -x c++ -c $< -o $@
$(BIN): $(BUILD)/train_gpt.o $(OBJ)
	$(CXX) $(OPT) $(LDSAN) -fopenmp -o $@ $^ $(LDLIBS)
endif

$(BUILD)/run_tests: $(TEST_OBJ) $(OBJ)
	$(CXX) $(OPT) $(LDSAN) -fopenmp -o $@ $^ $(LDLIBS)

# The test binary prints its own closing line "N passed, N failed".
test: $(BUILD)/run_tests $(BIN)
	@TG_BIN=$(CURDIR)/$(BIN) OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(BUILD)/run_tests

run: train_gpt
	@test -f data/toy/meta.json || ./train_gpt prepare toy --out data/toy
	./train_gpt train --config configs/default.json --train.threads=$(THREADS)

bench: train_gpt
	./train_gpt bench --threads=$(THREADS)

format:
	clang-format -i train_gpt.cu src/*.h src/*.cpp src/cpu/*.h src/cpu/*.cpp tests/*.cpp tests/*.h

clean:
	rm -rf build train_gpt

-include $(OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BUILD)/train_gpt.d
