// tests/cuda_emu/include/cuda_emu_streams.h: the stream mode of the emulation (a build with -DEMU_STREAMS and
// -fsanitize=thread; tests/cuda_emu/build.sh --streams). The interface cuda_emu.h, cublasLt.h and nccl.h call; the
// runtime is tests/cuda_emu/streams.cpp, compiled without instrumentation and linked in.
//
// Streams run as on a GPU. Every kernel, copy, memset, cuBLASLt product, event record and NCCL operation is queued
// on its stream and run later, in an order drawn from a seeded generator (EMU_STREAM_SEED, default 1, mixed with
// the world rank) that respects only what CUDA promises: the order within a stream, cudaStreamWaitEvent, the legacy
// default stream (an operation on stream 0 waits for all earlier work of the other streams, and their later work
// waits for it), and the host's synchronisations (cudaStreamSynchronize, cudaEventSynchronize,
// cudaDeviceSynchronize, cudaStreamQuery / cudaEventQuery when they answer done, blocking cudaMemcpy, an async copy
// to or from pageable memory, cudaFree). Each call to the runtime may run some queued work first, as a GPU runs
// work while the host goes on; a queue deeper than 1024 operations is run down. An NCCL operation starts when its
// turn comes (its MPI requests posted) and holds its stream until they complete, so other streams run meanwhile.
// A copy from the device into pinned memory (cudaMallocHost) fills the destination with 0xff bytes when it is
// queued (unless a queued copy still reads those bytes), so a host read before the synchronisation sees NaN.
//
// With it, a happens-before checker. Device and pinned memory come from one arena whose every 2-byte granule has a
// shadow: the epoch (stream, clock) of its last write and of its last reads from up to two streams. Each queued
// operation that touches memory takes the next clock of its stream and the stream's vector clock; record and wait
// join vector clocks as CUDA orders the work, the host is stream H with its own clock, and each synchronisation
// joins the host's. Every load and store of the program's code (kernels, the emulated cuBLASLt and NCCL, host code)
// reaches the checker through the compiler's -fsanitize=thread instrumentation (the __tsan_* calls; no ThreadSanitizer
// runtime is linked); copies, memsets and MPI's transfers record their byte ranges explicitly. Two accesses to one
// granule, one a write, from different streams with no ordering edge between them are an emulation error naming both
// operations (what, file:line), their streams and the buffer (its size, the offset, where it was allocated). The
// verdict depends on the program's order of calls only, not on the drawn schedule: the schedule makes a missing
// edge visible in the numbers, the checker names it. Also errors: a host access to device memory, a kernel's access
// to pinned host memory (the program keeps the two apart, which keeps the poison above sound). EMU_STREAM_STATS=1
// prints at exit how many operations ran, and how many of them ran before work queued earlier on another stream.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

namespace emu_streams {
// memory: the arena (device memory and pinned host memory); file:line name the allocation in messages
void* alloc(size_t n, bool pinned, const char* file, int line);
bool release(void* p);  // false: not an allocation of the arena
bool in_arena(const void* p);
bool is_pinned(const void* p);
// the work: enqueue(stream, ...) queues `run` on stream index `stream` (0 the legacy default stream, 1.. created ones);
// `poll`, when given, makes the operation one that starts with run() and completes when poll() returns true (NCCL).
// `host_src`/`host_n`: pinned host bytes the operation reads when it runs (the poison rule above).
void enqueue(int stream, const char* what, const char* file, int line, std::function<void()> run,
             std::function<bool()> poll = {}, const void* host_src = nullptr, size_t host_n = 0);
void access(const void* p, size_t n, bool write);  // an explicit range, by the running operation or the host
void poison_pinned(void* p, size_t n);             // 0xff into pinned p[0, n) unless a queued copy reads it
int stream_create();
void stream_destroy(int s);
void sync_stream(int s);
bool query_stream(int s);
void sync_last(int s);  // the host waits for the last operation queued on stream s (copies to or from pageable memory)
void sync_device();
int event_create();
void event_record(int e, int s, std::function<void()> run);
void event_wait(int s, int e);
void event_sync(int e);
bool event_query(int e);
long errors();
const char* current_what();  // the running operation (messages)
}  // namespace emu_streams
