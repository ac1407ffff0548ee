/* runtime.h: the process's virtual TPU chips: configuration, devices, memory and streams.
 *
 * Configuration comes from the environment on first use:
 *   TORCHTPU_CHIP   generation: v4, v5e (default), v5p, v6e, v7
 *   TORCHTPU_CHIPS  chip count "N" (default 1) or a topology "AxB" / "AxBxC"
 *                   (product = chip count, at most TPU_MAX_CHIPS)
 * A bad value makes tpu_runtime_init fail with TPU_ERR_INVALID_ARGUMENT and a message
 * naming the variable, the value and what is accepted. Each device owns its HBM arena,
 * caching allocator and stream; devices live until tpu_runtime_shutdown.
 */
#ifndef TPU_RUNTIME_H
#define TPU_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>

#include "tpu/caching_allocator.h"
#include "tpu/chip.h"
#include "tpu/hbm.h"
#include "tpu/status.h"
#include "tpu/stream.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TPU_MAX_CHIPS 64
#define TPU_MAX_TOPOLOGY_DIMS 3

typedef struct tpu_runtime_config {
  const tpu_chip_spec_t *chip;            /* generation of every chip */
  int chip_count;                         /* 1..TPU_MAX_CHIPS */
  int topology_ndim;                      /* 1..3 */
  int topology[TPU_MAX_TOPOLOGY_DIMS];    /* product == chip_count */
} tpu_runtime_config_t;

/* Parses the two variables' values (NULL or "" means the default) without touching
 * the environment, so tests can check every error message. */
tpu_status_t tpu_runtime_config_parse(const char *chip, const char *chips,
                                      tpu_runtime_config_t *out_config);

/* Reads the environment and creates the devices. Idempotent and thread-safe: later
 * calls return the first call's result (and message). */
tpu_status_t tpu_runtime_init(void);
/* Same, with an explicit configuration (tests); fails if already initialized. */
tpu_status_t tpu_runtime_init_with_config(const tpu_runtime_config_t *config);
/* Synchronizes and destroys every device; tpu_runtime_init may be called again.
 * Pointers to devices, their memory and streams become invalid: no other thread may
 * be using them while this runs. */
void tpu_runtime_shutdown(void);

/* The active configuration; NULL before a successful init. */
const tpu_runtime_config_t *tpu_runtime_config(void);
/* Number of chips; 0 before a successful init. */
int tpu_device_count(void);

typedef struct tpu_device tpu_device_t;

/* The device |index|; TPU_ERR_OUT_OF_RANGE with "tpu:<index> does not exist; this
 * process has N chips (TORCHTPU_CHIPS=...)" if out of range. Borrowed. */
tpu_status_t tpu_device_get(int index, tpu_device_t **out_device);
int tpu_device_index(const tpu_device_t *dev);
const tpu_chip_spec_t *tpu_device_spec(const tpu_device_t *dev);
tpu_hbm_t *tpu_device_hbm(tpu_device_t *dev);
tpu_caching_allocator_t *tpu_device_allocator(tpu_device_t *dev);
tpu_stream_t *tpu_device_stream(tpu_device_t *dev);

/* The index of the chip whose HBM holds |ptr|, or -1. */
int tpu_device_of_ptr(const void *ptr);

/* Synchronizes every chip's stream; returns the first error found. */
tpu_status_t tpu_runtime_synchronize_all(void);

/* Whether a thread that synchronizes may help run the chips' kernels while it waits
 * (tpu_pool_help), and an idle chip's worker may spin a while before it sleeps
 * (tpu_stream_set_idle_spin). On by default when the process has fewer chips than cores; a
 * process group of several processes on one host turns it off, since the processes share
 * the cores and a spinning thread would take one from a peer. Applies to later inits too. */
void tpu_runtime_set_helping(bool allowed);

#ifdef __cplusplus
}
#endif
#endif /* TPU_RUNTIME_H */
