/* bridge.h: the C ABI between the CPython module (module.c) and the C++ bridge
 * (device.cpp, ops.cpp, native.cpp, eager.cpp). Functions that can fail return 0 on
 * success or a negative TPU_BRIDGE_ERR_* code naming the Python exception to raise, with
 * the message in tpu_status_message().
 * The runtime itself (devices, memory statistics) is reached through include/tpu/.
 */
#ifndef TORCHTPU_BRIDGE_H
#define TORCHTPU_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  TPU_BRIDGE_ERR_RUNTIME = -1, /* RuntimeError */
  TPU_BRIDGE_ERR_INDEX = -2,   /* IndexError (an index a kernel found out of range) */
  TPU_BRIDGE_ERR_OOM = -3,     /* torch.OutOfMemoryError */
};

/* Initializes the runtime from the environment (idempotent). 0 or an error code. */
int tpu_bridge_init(void);
/* 1 after a fork() in a process whose runtime was initialized. */
int tpu_bridge_in_bad_fork(void);

/* The calling thread's current device index (0 by default). */
int tpu_bridge_current_device(void);
/* Sets the current device after checking the index. 0 or -1. */
int tpu_bridge_set_device(int index);
/* Waits for the device's stream (index < 0: every device); surfaces deferred errors. */
int tpu_bridge_synchronize(int index);

/* Random number generation: the default generator of device |index|. */
int tpu_bridge_manual_seed(int index, uint64_t seed);
int tpu_bridge_seed(int index, uint64_t *out_seed);          /* non-deterministic seed */
int tpu_bridge_initial_seed(int index, uint64_t *out_seed);
/* The state as bytes: *out_size receives the size; with buf == NULL only the size. */
int tpu_bridge_get_rng_state(int index, uint8_t *buf, size_t *inout_size);
int tpu_bridge_set_rng_state(int index, const uint8_t *buf, size_t size);

/* The CPU fallback. mode: 0 warn (once per op), 1 silent, 2 error. */
enum { TPU_FALLBACK_WARN = 0, TPU_FALLBACK_SILENT = 1, TPU_FALLBACK_ERROR = 2 };
void tpu_bridge_set_fallback_mode(int mode);
int tpu_bridge_get_fallback_mode(void);
/* Calls |fn| once per op that went through the fallback, with its call count. */
void tpu_bridge_fallback_stats(void (*fn)(void *ctx, const char *op, uint64_t count),
                               void *ctx);
void tpu_bridge_reset_fallback_stats(void);

/* Matmul precision (0 DEFAULT, 1 HIGH, 2 HIGHEST), process-wide. */
void tpu_bridge_set_precision(int precision);
int tpu_bridge_get_precision(void);

/* Fused eager statistics: |fn| is called with ("ops_recorded", n), ("graphs_run", n),
 * ("graph_cache_hits", n), ("graph_cache_misses", n), then ("flush:<reason>", n) per reason. */
void tpu_bridge_fused_stats(void (*fn)(void *ctx, const char *name, uint64_t count), void *ctx);
void tpu_bridge_reset_fused_stats(void);
/* Runs the pending graph of chip |index| (every chip if < 0); |reason| for the statistics
 * (a string with static storage duration). 0 or an error code. */
int tpu_bridge_flush(int index, const char *reason);

/* torch.tpu.set_sync_debug_mode: what an op that waits for the chip without being asked
 * to (Tensor.item(), a copy to the host, the CPU fallback, growing a storage that holds
 * data: device.h check_implicit_sync) does. torch.tpu.synchronize(), Event and Stream
 * synchronize never count. */
enum { TPU_SYNC_DEBUG_OFF = 0, TPU_SYNC_DEBUG_WARN = 1, TPU_SYNC_DEBUG_ERROR = 2 };
void tpu_bridge_set_sync_debug_mode(int mode);
int tpu_bridge_get_sync_debug_mode(void);

/* Eager mode: 0 strict, 1 debug, 2 fused. */
int tpu_bridge_eager_mode(void);
void tpu_bridge_set_eager_mode(int mode);

/* The eager executable cache. */
void tpu_bridge_cache_stats(uint64_t *hits, uint64_t *misses, uint64_t *entries,
                            uint64_t *compile_ns);
/* The persistent layer (TORCHTPU_CACHE_DIR): 1 if enabled, else 0 (counts all 0). A hit is
 * an in-memory miss served from disk (no lowering, no compile from scratch). */
int tpu_bridge_disk_cache_stats(uint64_t *hits, uint64_t *misses, uint64_t *writes,
                                uint64_t *errors);

#ifdef __cplusplus
}
#endif
#endif /* TORCHTPU_BRIDGE_H */
