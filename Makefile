# train_gpt Makefile, in llm.c's manner: detect what the machine has, build what it can.
#   make train_gpt_cpu     CPU reference trainer (OpenMP; MPI when mpicxx is found)
#   make train_gpt         CUDA trainer (needs nvcc; NCCL when found)
#   make test              build everything buildable, run every test, print "N passed, N failed, N skipped"
# Variables: PRECISION=BF16|FP32 (CUDA), NO_MPI=1, NO_NCCL=1, NO_OMP=1, CUDA_HOME, NCCL_HOME.

CXX ?= g++
CUDA_HOME ?= /usr/local/cuda
BUILD ?= build
PYTHON ?= /usr/bin/python3

# ---- CPU flags ---------------------------------------------------------------------------------
CXXFLAGS ?= -O3 -march=native
CXXFLAGS += -std=c++17 -Wall -Wextra -Wno-unused-parameter -Wno-unused-function -I.
LDLIBS += -lm
ifeq ($(NO_OMP),)
  CXXFLAGS += -fopenmp
endif

# MPI: use mpicxx's flags when it is on PATH (the CPU trainer's parallel layouts need it).
MPICXX := $(shell command -v mpicxx 2>/dev/null)
ifeq ($(NO_MPI),)
  ifneq ($(MPICXX),)
    MPI_CFLAGS := $(shell $(MPICXX) --showme:compile 2>/dev/null) -DUSE_MPI
    MPI_LIBS := $(shell $(MPICXX) --showme:link 2>/dev/null)
  endif
endif

# ---- CUDA flags --------------------------------------------------------------------------------
NVCC := $(shell command -v nvcc 2>/dev/null || (test -x $(CUDA_HOME)/bin/nvcc && echo $(CUDA_HOME)/bin/nvcc))
GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a
NVCC_FLAGS ?= -O3 --use_fast_math -std=c++17 -I. -Xcompiler -Wall,-Wno-unused-function $(GENCODE) --expt-relaxed-constexpr
NVCC_LDLIBS := -lcublas -lcublasLt
PRECISION ?= BF16
ifeq ($(PRECISION),FP32)
  NVCC_FLAGS += -DENABLE_FP32
endif
# NCCL: system install, NCCL_HOME, or the headers and library inside Python's NCCL wheel.
NCCL_HOME ?= $(shell for d in $(CUDA_HOME) /usr /usr/local $$($(PYTHON) -c 'import nvidia.nccl;print(list(nvidia.nccl.__path__)[0])' 2>/dev/null); do \
                 if [ -f $$d/include/nccl.h ]; then echo $$d; break; fi; done)
ifeq ($(NO_NCCL),)
  ifneq ($(NCCL_HOME),)
    NVCC_FLAGS += -DUSE_NCCL -I$(NCCL_HOME)/include
    # Python's wheel ships only libnccl.so.2 (no unversioned symlink): link that file by name
    NCCL_LIBNAME := $(if $(wildcard $(NCCL_HOME)/lib/libnccl.so $(NCCL_HOME)/lib64/libnccl.so),-lnccl,-l:libnccl.so.2)
    NCCL_LDLIBS := -L$(NCCL_HOME)/lib -L$(NCCL_HOME)/lib64 -Xlinker -rpath=$(NCCL_HOME)/lib $(NCCL_LIBNAME)
  endif
endif

HEADERS := $(wildcard llmc/*.h)
CUDA_HEADERS := $(wildcard llmc/*.cuh)

.PHONY: all test test_all clean
all: train_gpt_cpu test_gpt_cpu

train_gpt_cpu: train_gpt_cpu.cpp $(HEADERS)
	$(CXX) $(CXXFLAGS) $(MPI_CFLAGS) $< -o $@ $(LDLIBS) $(MPI_LIBS)

test_gpt_cpu: test_gpt_cpu.cpp train_gpt_cpu.cpp tests/check.h $(HEADERS)
	$(CXX) $(CXXFLAGS) $(MPI_CFLAGS) $< -o $@ $(LDLIBS) $(MPI_LIBS)

# Topic fragments (tests, tools, dev programs) add their own targets and append to ALL_TEST_DEPS.
-include mk/*.mk

# `make test` first installs missing dependencies (or names the command), then re-reads this
# Makefile so that MPI and NCCL detection sees them.
test:
	@bash scripts/install_deps.sh
	@$(MAKE) --no-print-directory test_all

test_all: train_gpt_cpu test_gpt_cpu $(ALL_TEST_DEPS)
	@bash scripts/run_tests.sh

clean:
	rm -rf $(BUILD) train_gpt_cpu test_gpt_cpu train_gpt test_gpt train_gpt_fp32 test_gpt_fp32
