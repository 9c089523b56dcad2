# selfsup — one Makefile for the whole tree.
#
#   make                 build every binary into build/
#   make test            install deps, build, run the fuzz smoke runs, then the test suite
#   make SANITIZE=1 test the same under AddressSanitizer + UndefinedBehaviorSanitizer (build/san/)
#   make SANITIZE=thread unit  the threaded and shared-memory suites under ThreadSanitizer (build/tsan/)
#   make deps            install the Debian packages the project needs (no-op when present;
#                        make test-deps adds the Slurm daemons the tests start)
#   make demo            the main job on its own data
#   make bench           speed measurements against the PyTorch/VISSL way
#   make install PREFIX=/usr/local
#
# Sources are found by directory: lib/*.c is the common library, every stage folder with a
# main.c is one binary, tests/unit/*.c is one Criterion binary. Header dependencies come
# from -MMD, so editing a header rebuilds what includes it.

SHELL      := /bin/bash
# Build with every core unless the caller chose a -j (the recursive makes of `test`, `demo`
# and `bench` inherit it).
ifeq ($(filter -j%,$(MAKEFLAGS)),)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif
CC         ?= cc
PREFIX     ?= /usr/local
BUILD      ?= build
SANITIZE   ?= 0
FUZZ_SECONDS ?= 20

ifeq ($(SANITIZE),1)
  override BUILD := $(BUILD)/san
  SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
else ifeq ($(SANITIZE),thread)
  # ThreadSanitizer (build/tsan/): the stage binaries the tests spawn are TSan builds too.
  # `unit` runs only the suites whose code shares memory between threads or processes: the
  # ring (and its futexes), the transports end to end (pipeline, streams), the ZeroMQ control
  # plane and its ZAP handler thread (control, auth), collate, records, and our other threads:
  # the data chain under the orchestrator (data_pipeline: `selfsup dataset`'s PNG workers,
  # decode's dataset thread), decode's worker pool (decode), the local copy (localcopy) and
  # the thread that watches a world beside NCCL's (collective_watch: its ranks are threads).
  # TSan checks the threads of one process: what two processes do to a ring is out of its
  # sight (a ring shared by threads of one process is in it). tests/tsan.supp says what is
  # suppressed and why (libzmq, libsodium, oneDNN: not instrumented; nothing of ours).
  # Left out, and run in the other builds:
  #  - the six tests whose forked child starts threads (ZeroMQ's). Criterion's test process
  #    already has a thread of Criterion's own when a test forks, and TSan cannot follow a
  #    child of a multi-threaded process that starts threads: by default it kills the child
  #    ("starting new threads after multi-threaded fork is not supported"); with
  #    die_after_fork=0 it dies on the new thread ("dup thread with used id").
  #  - the tests whose verdict is a wall-clock deadline that TSan's slowdown breaks: two signal
  #    a run 300 ms after its last stage appears, assuming the stages run by then (under TSan
  #    they are often still starting), and the kill rounds want each run to end within 2 s of
  #    a kill (2.3 s seen). Their concurrency is between processes, out of TSan's sight.
  override BUILD := $(BUILD)/tsan
  SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
  TSAN_FORKS_THREADS := roundtrip_ipc_two_processes|roundtrip_tcp_two_processes|child_forked_after_the_context_exists|control_tcp_refuses_a_peer_without_a_listed_key|control_ipc_other_users_cannot_connect|data_tcp_reader_refuses_forged_records
  TSAN_TOO_SLOW := sigint_stops_cleanly|silent_stage_counts_as_hung|kill_producer|kill_worker|kill_consumer
  UNIT_ARGS ?= --filter '@(ring|pipeline|streams|control|auth|collate|record|data_pipeline|decode|localcopy|collective_watch)/!($(TSAN_FORKS_THREADS)|$(TSAN_TOO_SLOW))'
  # The loader runs the ifunc resolver of a target_clones function (the SIMD kernels) while
  # relocating the program, before TSan is initialised, and GCC instruments that resolver
  # with TSan's function-entry hook, which then writes through a null shadow stack: every
  # binary dies at load. The files that use target_clones go without the entry/exit hook;
  # their memory accesses are still checked, only their frames are missing from stacks.
  # (The OpenMP objects below, which have some too, are not instrumented at all.)
  TSAN_OMP_SRC := nn/cpu/% stages/svm/% stages/knn/%
  TSAN_CLONES_SRC := $(filter-out $(TSAN_OMP_SRC),$(shell grep -lE 'target_clones|CPU_HOT|SIMD_CLONES' lib/*.c shm/*.c nn/*.c stages/*/*.c 2>/dev/null))
  $(TSAN_CLONES_SRC:%.c=$(BUILD)/obj/%.o): CFLAGS += --param=tsan-instrument-func-entry-exit=0
  # OpenMP's runtime (libgomp, which oneDNN runs on too) is not instrumented, so TSan cannot see
  # how a parallel region hands its data to the team and takes it back, and reports every
  # region as racing (the workers' reads of what the caller wrote before the region). The
  # objects built with -fopenmp (nn/cpu, stages/svm, stages/knn: the compute kernels, which
  # share nothing with the rings, the transports or the control plane) are therefore built
  # without TSan, instead of suppressing reports in our code by name. Limiting OpenMP to one
  # thread (OMP_THREAD_LIMIT=1) is no way out: oneDNN sizes its kernels for the threads it
  # asked for and its backward convolution then waits forever for the missing one.
  $(TSAN_OMP_SRC:%=$(BUILD)/obj/%.o): SANFLAGS :=
  # Criterion's sandboxes cannot find room for their shared arena beside TSan's shadow
  # without this (tests/tsan_boxfort.c says why); no other build links it.
  UNIT_EXTRA_OBJ := $(BUILD)/obj/tests/tsan_boxfort.o
endif

PKGS       := yaml-0.1 jansson libzmq libzip libjpeg libpng libwebp libwebpdemux libtiff-4 liburing zlib
CPPFLAGS   += -iquote lib -iquote shm -iquote nn -iquote stages -D_GNU_SOURCE $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
CFLAGS     ?= -O2 -g
# -ffp-contract=off: no fused multiply-adds, whatever -march says, because the PIL-exact
# pixel kernels and torch-exact float paths round after every multiply, as PIL and torch do.
CFLAGS     += -ffp-contract=off -std=gnu17 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wvla -MMD -MP $(SANFLAGS)
LDFLAGS    += $(SANFLAGS)
LDLIBS     += $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lyaml -ljansson -lzmq -lzip -ljpeg -lpng16 -lwebp -lwebpdemux -ltiff -luring -lz) -lgif -ldnnl -llinear -lgomp -lm
# LAPACK (the retrieval benchmark's PCA: dsyevd) only where a binary calls it.
LDLIBS     += -Wl,--as-needed -llapack -lblas -Wl,--no-as-needed

# ---- CUDA: the GPU backend (nn/cuda/) is compiled wherever a CUDA toolkit is found ----------
# Kernels (.cu) go through nvcc, for Hopper (sm_90a machine code) plus compute_90 PTX that
# other cards compile when they load it; the cuDNN/cuBLAS calls (.c) through cc. cudart is
# linked statically, so a binary needs only cuDNN, cuBLAS and NCCL from the machine it runs on.
# The toolkit is the first of $(CUDA_HOME), /usr/local/cuda and the one nvcc on PATH lives in
# that has nvcc, cudnn.h, cublas_v2.h and nccl.h (several GPUs as one model) together: an nvcc
# on PATH may be a wrapper script in /usr/local/bin whose headers are elsewhere. Without one the build is the cpu-only one, and
# MACHINE.DEVICE=gpu is refused as a config error. The RUNPATH lets a build find cuDNN where it
# was built; LD_LIBRARY_PATH (the GPU bundle's env.sh) still comes first.
cuda_toolkit = $(and $(wildcard $(1)/bin/nvcc),$(wildcard $(1)/include/cudnn.h),$(wildcard $(1)/include/cublas_v2.h),$(wildcard $(1)/include/nccl.h),$(1))
CUDA_PLACES := $(CUDA_HOME) /usr/local/cuda $(patsubst %/bin/nvcc,%,$(realpath $(shell command -v nvcc 2>/dev/null)))
CUDA_HOME  := $(firstword $(foreach d,$(CUDA_PLACES),$(call cuda_toolkit,$(d))))
CUDA_SRC   := $(wildcard nn/cuda/*.cu)
ifneq ($(CUDA_HOME),)
  HAVE_CUDA := 1
  NVCC      := $(CUDA_HOME)/bin/nvcc
  CUDA_OBJ  := $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o)
  CPPFLAGS  += -DHAVE_CUDA=1
  NVCCFLAGS := -O3 -std=c++17 -g -lineinfo -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 \
               -Xcompiler -Wall,-Wextra -Werror all-warnings -MMD -MP
  LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,--enable-new-dtags,-rpath,$(CUDA_HOME)/lib64 -Wl,--as-needed -lcudnn -lcublas -lnccl -lcudart_static -lstdc++ -ldl -lrt -Wl,--no-as-needed
endif

# ---- sources ------------------------------------------------------------------------------
# lib/ is the common code, shm/ the plumbing between processes (records, rings, transports,
# the stage framework, the control plane); both go into libselfsup.a.
LIB_SRC    := $(wildcard lib/*.c shm/*.c)
# A stage's working parts (stages/NAME/*.c other than main.c: decoders, transforms,
# collators) also go into the library, so that unit tests and benchmarks can call them.
STAGE_LIB_SRC := $(filter-out %/main.c,$(wildcard stages/*/*.c))
LIB_SRC    += $(STAGE_LIB_SRC)
# nn/ is the model engine: the backend-neutral front (nn/*.c) and the cpu backend (oneDNN).
NN_SRC     := $(wildcard nn/*.c nn/cpu/*.c) $(if $(HAVE_CUDA),$(wildcard nn/cuda/*.c))
LIB_OBJ    := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(NN_SRC:%.c=$(BUILD)/obj/%.o)
# The cpu backend spreads its own loops (batch norm, elementwise) over OpenMP's threads, the
# same runtime oneDNN uses here (libgomp), so the two share one pool and one --threads.
$(BUILD)/obj/nn/cpu/%.o: CFLAGS += -fopenmp
# The evaluators spread classes × costs × folds (SVM) and test chunks (kNN) the same way.
$(BUILD)/obj/stages/svm/%.o $(BUILD)/obj/stages/knn/%.o: CFLAGS += -fopenmp
LIBSELFSUP := $(BUILD)/libselfsup.a

# The front door: `selfsup` (orchestrator/ holds its commands).
SELFSUP_SRC := $(wildcard orchestrator/*.c)
SELFSUP_OBJ := $(SELFSUP_SRC:%.c=$(BUILD)/obj/%.o)

# selfsup-cluster alone links FAISS (Debian's is a static C++ library, built against the
# Fortran BLAS and LAPACK): its one C++ file (stages/cluster/kmeans_faiss.cpp) wraps it, and
# sends FAISS's sgemm_ to oneDNN. Nothing else needs C++ or FAISS.
CXXFLAGS   := -O2 -g -std=c++17 -Wall -Wextra -Werror -MMD -MP $(SANFLAGS)
FAISS_OBJ  := $(BUILD)/obj/stages/cluster/kmeans_faiss.o
FAISS_LIBS := -lfaiss -llapack -lblas -lstdc++

# Every stages/NAME/main.c becomes selfsup-NAME.
STAGE_DIRS := $(patsubst %/main.c,%,$(wildcard stages/*/main.c))
STAGE_BINS := $(STAGE_DIRS:stages/%=$(BUILD)/selfsup-%)

# Small stages that only the tests use (a synthetic producer, a pass-through worker, a
# checking consumer): tests/stages/NAME.c becomes selfsup-test-NAME.
TSTAGE_SRC  := $(wildcard tests/stages/*.c)
TSTAGE_BINS := $(TSTAGE_SRC:tests/stages/%.c=$(BUILD)/tests/selfsup-test-%)

BINS       := $(BUILD)/selfsup $(STAGE_BINS)

# Every bench/*.c is one benchmark program; bench/run.sh runs them beside the reference way.
BENCH_SRC  := $(wildcard bench/*.c)
BENCH_BINS := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)

# The backend conformance test (tests/gpu/): every operation on the cuda backend against the
# cpu one. Built everywhere; without a GPU it says so in one line and passes. `unit` also runs
# it cpu against cpu, every case's calls on the reference side (not under TSan: oneDNN's
# OpenMP threads are not instrumented).
GPU_TEST_BIN := $(BUILD)/tests/backend-ops
# The NCCL world against the collectives' definitions, one rank per GPU (tests/gpu/nccl_world.c);
# without a GPU it checks the world ids and passes.
NCCL_TEST_BIN := $(BUILD)/tests/nccl-world

UNIT_SRC   := $(wildcard tests/unit/*.c)
UNIT_OBJ   := $(UNIT_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_BIN   := $(BUILD)/tests/unit

# Fuzz targets need clang's libFuzzer; they are built in their own tree.
FUZZ_SRC   := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BUILD := $(BUILD)/fuzz
FUZZ_BINS  := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_BUILD)/%)
FUZZ_CC    := clang
FUZZ_FLAGS := -std=gnu17 -O1 -g -ffp-contract=off -iquote lib -iquote shm -iquote stages -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined \
              -fno-sanitize-recover=undefined $(shell pkg-config --cflags $(PKGS) 2>/dev/null)

.PHONY: all test unit fuzz deps golden-deps test-deps golden demo bench install clean check-deps gpu-bundle
.DEFAULT_GOAL := all

all: $(BINS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# The backend's plain-C parts include the CUDA headers, and so does the NCCL world's test.
$(BUILD)/obj/nn/cuda/%.o $(BUILD)/obj/tests/gpu/nccl_world.o: CPPFLAGS += -isystem $(CUDA_HOME)/include

$(LIBSELFSUP): $(LIB_OBJ) $(CUDA_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/selfsup: $(SELFSUP_OBJ) $(LIBSELFSUP)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/selfsup-%: $(BUILD)/obj/stages/%/main.o $(LIBSELFSUP)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/selfsup-cluster: $(BUILD)/obj/stages/cluster/main.o $(FAISS_OBJ) $(LIBSELFSUP)
	$(CC) $(LDFLAGS) $^ $(FAISS_LIBS) $(LDLIBS) -o $@

$(BUILD)/tests/selfsup-test-%: $(BUILD)/obj/tests/stages/%.o $(LIBSELFSUP)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIBSELFSUP)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(GPU_TEST_BIN): $(BUILD)/obj/tests/gpu/backend_ops.o $(LIBSELFSUP)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(NCCL_TEST_BIN): $(BUILD)/obj/tests/gpu/nccl_world.o $(LIBSELFSUP)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(UNIT_BIN): $(UNIT_OBJ) $(UNIT_EXTRA_OBJ) $(LIBSELFSUP)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -lcriterion -o $@

# The library is compiled once for all targets (coverage-instrumented, not linked with the
# fuzzer's main); each target links it with its own entry point. The trainer's and the
# evaluators' parts stand on the model engine, oneDNN, liblinear and OpenMP, which the parsers
# under fuzz do not need: they stay out.
FUZZ_OUT   := train extract svm knn
# The retrieval benchmark's dataset readers are fuzzed; its model and LAPACK parts are not.
FUZZ_OUT_OBJ := $(FUZZ_OUT:%=$(FUZZ_BUILD)/obj/stages/%/%) $(FUZZ_BUILD)/obj/stages/retrieval/describe.o \
              $(FUZZ_BUILD)/obj/stages/retrieval/pca.o
FUZZ_OBJ   := $(filter-out $(FUZZ_OUT_OBJ),$(LIB_SRC:%.c=$(FUZZ_BUILD)/obj/%.o))

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(subst -fsanitize=fuzzer,-fsanitize=fuzzer-no-link,$(FUZZ_FLAGS)) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJ)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_FLAGS) $< $(FUZZ_OBJ) $(LDLIBS) -o $@

# ---- dependencies -------------------------------------------------------------------------
# Build + run: compilers, libraries. Test: Criterion, clang (libFuzzer), numpy for golden
# read-back. Golden generation and bench: PyTorch, torchvision, scikit-learn (Debian's).
DEB_PKGS := build-essential pkg-config clang libyaml-dev libjansson-dev libzip-dev libjpeg62-turbo-dev \
            libpng-dev libwebp-dev libgif-dev libtiff-dev zlib1g-dev liburing-dev libzmq3-dev libdnnl-dev liblinear-dev liblapack-dev libblas-dev libfaiss-dev \
            libcriterion-dev \
            python3 python3-numpy python3-torch python3-torchvision python3-sklearn \
            dataset-fashion-mnist mate-backgrounds

# make test also starts a Slurm of its own (munged, slurmctld, three slurmd on this machine:
# tests/unit/test_slurm.c), which nothing else needs.
TEST_PKGS := $(DEB_PKGS) slurmctld slurmd slurm-client munge

# make golden also needs OpenCV (the Lab conversion's reference) and FAISS's Python module
# (ClusterFit's reference), which nothing else does.
GOLDEN_PKGS := $(DEB_PKGS) python3-opencv python3-faiss

deps golden-deps test-deps:
	@missing=$$(for p in $(if $(filter golden-deps,$@),$(GOLDEN_PKGS),$(if $(filter test-deps,$@),$(TEST_PKGS),$(DEB_PKGS))); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; \
	  done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing:" $$missing; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

# ---- tests --------------------------------------------------------------------------------
# The Criterion run comes last so that its "Synthesis" line ends the output; when a test did
# not pass, tests/failures.sh then names it (from the run's XML report) below that line, where
# the tail of a CI log shows it.
# Under TSan every process (the test binary and each stage it spawns, which inherit the
# environment) stops at its first report with exit code 66, so a race fails its test; the
# caller's TSAN_OPTIONS come last and win.
ifeq ($(SANITIZE),thread)
  UNIT_ENV := TSAN_OPTIONS="suppressions=$(abspath tests/tsan.supp) halt_on_error=1 exitcode=66 second_deadlock_stack=1 $$TSAN_OPTIONS"
endif
unit: $(UNIT_BIN) $(BINS) $(TSTAGE_BINS) $(GPU_TEST_BIN) $(NCCL_TEST_BIN)
	$(GPU_TEST_BIN)
	$(if $(filter thread,$(SANITIZE)),,SELFSUP_BACKEND_OPS_PEER=cpu $(GPU_TEST_BIN))
	$(NCCL_TEST_BIN)
	rm -f $(BUILD)/unit-report.xml
	SELFSUP_BUILD=$(abspath $(BUILD)) SELFSUP_CONFIGS=$(abspath configs) LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp) \
	  $(UNIT_ENV) $(UNIT_BIN) --jobs 2 --xml=$(BUILD)/unit-report.xml $(UNIT_ARGS) \
	  || { tests/failures.sh $(BUILD)/unit-report.xml; exit 1; }

fuzz: $(FUZZ_BINS)
	@for f in $(FUZZ_BINS); do \
	  name=$$(basename $$f); corpus=tests/fuzz/corpus/$${name#fuzz_}; \
	  work=$$(mktemp -d); cp -r $$corpus/. $$work/ 2>/dev/null; \
	  echo "fuzz: $$name for $(FUZZ_SECONDS)s"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -rss_limit_mb=1024 -print_final_stats=0 \
	      $$work 2>$$work.log || { tail -40 $$work.log; rm -rf $$work; exit 1; }; \
	  grep -E '^Done [0-9]+ runs' $$work.log | tail -1; rm -rf $$work $$work.log; \
	done

test: test-deps
	$(MAKE) all
	$(MAKE) fuzz
	$(MAKE) unit

# Every fixture regenerated into a scratch folder and compared with the committed one and with
# tests/golden/MANIFEST (tests/golden/check.py says by which rules); about 15 minutes on 2 cores.
golden: golden-deps
	$(MAKE) $(BUILD)/tests/selfsup-test-augtrace
	/usr/bin/python3 tests/golden/check.py $(BUILD)

# ---- demo and bench -----------------------------------------------------------------------
demo: deps
	$(MAKE) all $(TSTAGE_BINS)
	./demo/run.sh $(BUILD)

bench: deps
	$(MAKE) all $(BENCH_BINS)
	./bench/run.sh $(BUILD)

# The GPU runbook's bundle (tests/gpu/bundle.sh): binaries, their Debian libraries and the
# end-to-end records in one file; tests/gpu/run.sh runs it on a GPU machine.
gpu-bundle: deps
	$(MAKE) all $(GPU_TEST_BIN) $(NCCL_TEST_BIN) $(BUILD)/tests/selfsup-test-passthru $(BUILD)/bench/farm_bench
	./tests/gpu/bundle.sh $(BUILD)

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/selfsup
	install -m 0755 $(BINS) $(DESTDIR)$(PREFIX)/bin/
	cp -r configs $(DESTDIR)$(PREFIX)/share/selfsup/

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
