# mk/parallel.mk: the parallel bookkeeping headers' unit tests and weight comparer.
#   make build/test_parallel    built by `make test`; tests/t_parallel.sh runs it, and runs
#                               train_gpt_cpu under mpirun in every parallel layout of its matrix
PARALLEL_HEADERS := llmc/topology.h llmc/pp_schedule.h llmc/zero.h llmc/tp.h llmc/comm.h llmc/params.h llmc/config.h llmc/safetensors.h

$(BUILD)/test_parallel: tests/test_parallel.cpp tests/check.h $(PARALLEL_HEADERS)
	@mkdir -p $(BUILD)
	$(CXX) $(CXXFLAGS) $< -o $@ $(LDLIBS)

ALL_TEST_DEPS += $(BUILD)/test_parallel
