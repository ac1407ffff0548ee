/* runtime.c: the process's virtual TPU chips: configuration from the environment,
 * device creation and lookup, and shutdown (see runtime.h).
 *
 * One global state guarded by one mutex. Init remembers its result and message so
 * every later call reports the same thing until shutdown. The mutex is never held
 * while waiting on a stream, so tasks on a worker may call back into the runtime.
 */
#include "tpu/runtime.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct tpu_device {
  int index;
  const tpu_chip_spec_t *spec;
  tpu_hbm_t *hbm;
  tpu_caching_allocator_t *allocator;
  tpu_stream_t *stream;
};

static pthread_mutex_t g_shutdown_mu = PTHREAD_MUTEX_INITIALIZER; /* one shutdown at a time */

static struct {
  pthread_mutex_t mu;
  bool attempted;              /* an init ran since the last shutdown */
  tpu_status_t status;         /* its result */
  char message[TPU_STATUS_MESSAGE_CAP]; /* its message when it failed */
  tpu_runtime_config_t config; /* valid when attempted and status == TPU_OK */
  tpu_device_t *devices[TPU_MAX_CHIPS];
  int count;
  bool no_helping;             /* tpu_runtime_set_helping(false) was called */
} g_rt = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- configuration -------------------------------------------------------- */

#define CHIPS_EXPECTED "expected a chip count 1..64 or a topology such as 2x4"
_Static_assert(TPU_MAX_CHIPS == 64, "update CHIPS_EXPECTED");
_Static_assert(TPU_CHIP_GEN_COUNT == 5, "update the TORCHTPU_CHIP message");

/* Parses "N", "AxB" or "AxBxC" (each factor >= 1, product <= TPU_MAX_CHIPS). */
static tpu_status_t parse_chips(const char *text, tpu_runtime_config_t *cfg) {
  int dims[TPU_MAX_TOPOLOGY_DIMS + 1];
  int ndim = 0;
  long product = 1;
  const char *p = text;
  for (;;) {
    if (*p < '0' || *p > '9') goto bad_syntax;
    long v = 0;
    while (*p >= '0' && *p <= '9') {
      v = v * 10 + (*p++ - '0');
      if (v > TPU_MAX_CHIPS) v = TPU_MAX_CHIPS + 1; /* saturate: too many anyway */
    }
    if (v == 0) goto bad_syntax;
    if (ndim == TPU_MAX_TOPOLOGY_DIMS) {
      return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                            "TORCHTPU_CHIPS=\"%.40s\": a topology has at most 3 dimensions; "
                            CHIPS_EXPECTED, text);
    }
    dims[ndim++] = (int)v;
    product *= v; /* <= 65^3: no overflow */
    if (*p == '\0') break;
    if (*p != 'x' && *p != 'X') goto bad_syntax;
    p++;
  }
  if (product > TPU_MAX_CHIPS) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "TORCHTPU_CHIPS=\"%.40s\": more than %d chips in one process; "
                          CHIPS_EXPECTED, text, TPU_MAX_CHIPS);
  }
  cfg->chip_count = (int)product;
  cfg->topology_ndim = ndim;
  for (int i = 0; i < TPU_MAX_TOPOLOGY_DIMS; i++) cfg->topology[i] = i < ndim ? dims[i] : 1;
  return TPU_OK;
bad_syntax:
  return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "TORCHTPU_CHIPS=\"%.40s\": " CHIPS_EXPECTED,
                        text);
}

tpu_status_t tpu_runtime_config_parse(const char *chip, const char *chips,
                                      tpu_runtime_config_t *out_config) {
  tpu_runtime_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  if (!chip || !chip[0]) chip = "v5e";
  if (tpu_chip_spec_find(chip, &cfg.chip) != TPU_OK) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                          "TORCHTPU_CHIP=\"%.40s\": unknown TPU generation; valid: v4, v5e, v5p, "
                          "v6e, v7", chip);
  }
  if (!chips || !chips[0]) chips = "1";
  TPU_RETURN_IF_ERROR(parse_chips(chips, &cfg));
  *out_config = cfg;
  return TPU_OK;
}

/* "2", "2x4" or "2x2x4": the config's TORCHTPU_CHIPS value. */
static void format_topology(const tpu_runtime_config_t *cfg, char *buf, size_t size) {
  int n = snprintf(buf, size, "%d", cfg->topology[0]);
  for (int i = 1; i < cfg->topology_ndim && n > 0 && (size_t)n < size; i++) {
    n += snprintf(buf + n, size - (size_t)n, "x%d", cfg->topology[i]);
  }
}

/* ---- devices -------------------------------------------------------------- */

static void device_destroy(tpu_device_t *dev) {
  if (!dev) return;
  tpu_stream_destroy(dev->stream); /* first: queued tasks may still free memory */
  tpu_caching_allocator_destroy(dev->allocator);
  tpu_hbm_destroy(dev->hbm);
  tpu_allocator_free(tpu_allocator_system(), dev);
}

static tpu_status_t device_create(int index, const tpu_chip_spec_t *spec, tpu_device_t **out) {
  tpu_allocator_t host = tpu_allocator_system();
  void *mem;
  TPU_RETURN_IF_ERROR(
      tpu_allocator_calloc(host, 1, sizeof(tpu_device_t), "tpu_runtime_init", &mem));
  tpu_device_t *dev = mem;
  dev->index = index;
  dev->spec = spec;
  char name[32];
  snprintf(name, sizeof(name), "tpu:%d", index);
  tpu_status_t st = tpu_hbm_create(spec->hbm_bytes, host, &dev->hbm);
  if (st == TPU_OK) st = tpu_caching_allocator_create(dev->hbm, index, host, &dev->allocator);
  if (st == TPU_OK) {
    tpu_caching_allocator_set_label(dev->allocator, spec->marketing_name);
    st = tpu_stream_create(name, host, &dev->stream);
  }
  if (st != TPU_OK) {
    device_destroy(dev);
    return tpu_status_set(st, "creating %s (%s): %s", name, spec->marketing_name,
                          tpu_status_message());
  }
  *out = dev;
  return TPU_OK;
}

/* Lends synchronizing threads to the kernels' pool (tpu_stream_set_helper_pool), and lets
 * idle stream workers spin before they sleep (tpu_stream_set_idle_spin), only while that
 * leaves no thread without a core: one per chip's stream plus the waiter. The caller holds
 * g_rt.mu. */
static void update_helping_locked(void) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  tpu_pool_t *pool = NULL;
  if (!g_rt.no_helping && g_rt.count + 1 <= cores && tpu_pool_default(&pool) != TPU_OK) {
    pool = NULL; /* no pool: nobody to help (the kernels report the error themselves) */
  }
  for (int i = 0; i < g_rt.count; i++) {
    tpu_stream_set_helper_pool(g_rt.devices[i]->stream, pool);
    tpu_stream_set_idle_spin(g_rt.devices[i]->stream, pool != NULL);
  }
}

void tpu_runtime_set_helping(bool allowed) {
  pthread_mutex_lock(&g_rt.mu);
  g_rt.no_helping = !allowed;
  update_helping_locked();
  pthread_mutex_unlock(&g_rt.mu);
}

/* Creates the devices of |cfg|; the caller holds g_rt.mu and has checked that
 * no devices exist. Records the result for later tpu_runtime_init calls. */
static tpu_status_t init_locked(const tpu_runtime_config_t *cfg) {
  tpu_status_t st = TPU_OK;
  if (!cfg->chip || cfg->chip_count < 1 || cfg->chip_count > TPU_MAX_CHIPS) {
    st = tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                        "tpu_runtime_init: invalid configuration (%d chips)", cfg->chip_count);
  }
  for (int i = 0; st == TPU_OK && i < cfg->chip_count; i++) {
    st = device_create(i, cfg->chip, &g_rt.devices[i]);
    if (st == TPU_OK) g_rt.count = i + 1;
  }
  if (st == TPU_OK) update_helping_locked();
  if (st != TPU_OK) {
    for (int i = 0; i < g_rt.count; i++) {
      device_destroy(g_rt.devices[i]);
      g_rt.devices[i] = NULL;
    }
    g_rt.count = 0;
    snprintf(g_rt.message, sizeof(g_rt.message), "%s", tpu_status_message());
  } else {
    g_rt.config = *cfg;
    g_rt.message[0] = '\0';
  }
  g_rt.attempted = true;
  g_rt.status = st;
  return st;
}

tpu_status_t tpu_runtime_init(void) {
  pthread_mutex_lock(&g_rt.mu);
  tpu_status_t st;
  if (g_rt.attempted) {
    st = g_rt.status;
    if (st != TPU_OK) tpu_status_set(st, "%s", g_rt.message);
  } else {
    tpu_runtime_config_t cfg;
    st = tpu_runtime_config_parse(getenv("TORCHTPU_CHIP"), getenv("TORCHTPU_CHIPS"), &cfg);
    if (st == TPU_OK) {
      st = init_locked(&cfg);
    } else {
      g_rt.attempted = true;
      g_rt.status = st;
      snprintf(g_rt.message, sizeof(g_rt.message), "%s", tpu_status_message());
    }
  }
  pthread_mutex_unlock(&g_rt.mu);
  return st;
}

tpu_status_t tpu_runtime_init_with_config(const tpu_runtime_config_t *config) {
  if (!config) {
    return tpu_status_set(TPU_ERR_INVALID_ARGUMENT, "tpu_runtime_init_with_config: no config");
  }
  pthread_mutex_lock(&g_rt.mu);
  tpu_status_t st;
  if (g_rt.attempted && g_rt.status == TPU_OK) {
    st = tpu_status_set(TPU_ERR_INVALID_ARGUMENT,
                        "tpu_runtime_init_with_config: already initialized with %d chip%s of %s; "
                        "call tpu_runtime_shutdown first",
                        g_rt.count, g_rt.count == 1 ? "" : "s", g_rt.config.chip->marketing_name);
  } else {
    st = init_locked(config);
  }
  pthread_mutex_unlock(&g_rt.mu);
  return st;
}

void tpu_runtime_shutdown(void) {
  /* Drain the streams first, with the devices still registered, so that running
   * tasks can still look them up; then take them out and destroy them. */
  pthread_mutex_lock(&g_shutdown_mu);
  tpu_runtime_synchronize_all();
  tpu_device_t *devices[TPU_MAX_CHIPS];
  pthread_mutex_lock(&g_rt.mu);
  int count = g_rt.count;
  memcpy(devices, g_rt.devices, sizeof(devices));
  memset(g_rt.devices, 0, sizeof(g_rt.devices));
  g_rt.count = 0;
  g_rt.attempted = false;
  g_rt.status = TPU_OK;
  g_rt.message[0] = '\0';
  memset(&g_rt.config, 0, sizeof(g_rt.config));
  pthread_mutex_unlock(&g_rt.mu);
  for (int i = 0; i < count; i++) device_destroy(devices[i]);
  pthread_mutex_unlock(&g_shutdown_mu);
}

/* ---- lookups -------------------------------------------------------------- */

const tpu_runtime_config_t *tpu_runtime_config(void) {
  pthread_mutex_lock(&g_rt.mu);
  const tpu_runtime_config_t *cfg = g_rt.count > 0 ? &g_rt.config : NULL;
  pthread_mutex_unlock(&g_rt.mu);
  return cfg;
}

int tpu_device_count(void) {
  pthread_mutex_lock(&g_rt.mu);
  int n = g_rt.count;
  pthread_mutex_unlock(&g_rt.mu);
  return n;
}

tpu_status_t tpu_device_get(int index, tpu_device_t **out_device) {
  *out_device = NULL;
  pthread_mutex_lock(&g_rt.mu);
  tpu_status_t st = TPU_OK;
  if (index >= 0 && index < g_rt.count) {
    *out_device = g_rt.devices[index];
  } else if (g_rt.count == 0) {
    st = tpu_status_set(TPU_ERR_OUT_OF_RANGE,
                        "tpu:%d does not exist; the TPU runtime is not initialized", index);
  } else {
    char topo[32];
    format_topology(&g_rt.config, topo, sizeof(topo));
    st = tpu_status_set(TPU_ERR_OUT_OF_RANGE,
                        "tpu:%d does not exist; this process has %d chip%s (TORCHTPU_CHIPS=%s)",
                        index, g_rt.count, g_rt.count == 1 ? "" : "s", topo);
  }
  pthread_mutex_unlock(&g_rt.mu);
  return st;
}

int tpu_device_index(const tpu_device_t *dev) { return dev->index; }
const tpu_chip_spec_t *tpu_device_spec(const tpu_device_t *dev) { return dev->spec; }
tpu_hbm_t *tpu_device_hbm(tpu_device_t *dev) { return dev->hbm; }
tpu_caching_allocator_t *tpu_device_allocator(tpu_device_t *dev) { return dev->allocator; }
tpu_stream_t *tpu_device_stream(tpu_device_t *dev) { return dev->stream; }

int tpu_device_of_ptr(const void *ptr) {
  int found = -1;
  pthread_mutex_lock(&g_rt.mu);
  for (int i = 0; i < g_rt.count && found < 0; i++) {
    if (tpu_hbm_contains(g_rt.devices[i]->hbm, ptr)) found = i;
  }
  pthread_mutex_unlock(&g_rt.mu);
  return found;
}

tpu_status_t tpu_runtime_synchronize_all(void) {
  tpu_stream_t *streams[TPU_MAX_CHIPS];
  pthread_mutex_lock(&g_rt.mu);
  int count = g_rt.count;
  for (int i = 0; i < count; i++) streams[i] = g_rt.devices[i]->stream;
  pthread_mutex_unlock(&g_rt.mu);
  tpu_status_t first = TPU_OK;
  char message[TPU_STATUS_MESSAGE_CAP] = "";
  for (int i = 0; i < count; i++) {
    tpu_status_t st = tpu_stream_synchronize(streams[i]);
    if (st != TPU_OK && first == TPU_OK) {
      first = st;
      snprintf(message, sizeof(message), "%s", tpu_status_message());
    }
  }
  return first == TPU_OK ? TPU_OK : tpu_status_set(first, "%s", message);
}
