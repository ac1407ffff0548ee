/* status.h: error codes and messages returned by every fallible torchtpu C call.
 *
 * A call returns TPU_OK (0) or an error code. The human-readable message for the
 * most recent error on the calling thread is kept in thread-local storage and read
 * with tpu_status_message(), like errno/strerror but with a formatted message that
 * names the operation and the problem ("hbm_alloc: out of memory on tpu:0 ...").
 */
#ifndef TPU_STATUS_H
#define TPU_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_status {
  TPU_OK = 0,
  TPU_ERR_INVALID_ARGUMENT,   /* bad value from the caller (size, index, name) */
  TPU_ERR_OUT_OF_MEMORY,      /* HBM arena of the chip is full */
  TPU_ERR_OUT_OF_RANGE,       /* index outside a valid range (device index, ...) */
  TPU_ERR_UNAVAILABLE,        /* resource could not be created (thread, mapping) */
  TPU_ERR_UNIMPLEMENTED,      /* the request is valid but not supported yet */
  TPU_ERR_DEVICE,             /* an operation failed while running on a stream */
  TPU_ERR_INTERNAL,           /* a broken invariant inside the library */
  TPU_STATUS_COUNT
} tpu_status_t;

/* Records |fmt| (printf-style) as the calling thread's last error message and
 * returns |code|, so that errors are raised as `return tpu_status_set(...)`. */
tpu_status_t tpu_status_set(tpu_status_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Bytes of the calling thread's message buffer (longer messages are truncated); also the
 * size of the buffers that keep a copy of one. */
#define TPU_STATUS_MESSAGE_CAP 512

/* The calling thread's last error message ("" if none). Borrowed; valid until
 * the next tpu_status_set on this thread. */
const char *tpu_status_message(void);

/* Clears the calling thread's last error message. */
void tpu_status_clear(void);

/* A short constant name for |code|, e.g. "OUT_OF_MEMORY". */
const char *tpu_status_name(tpu_status_t code);

#define TPU_RETURN_IF_ERROR(expr)          \
  do {                                     \
    tpu_status_t tpu_status_ = (expr);     \
    if (tpu_status_ != TPU_OK) return tpu_status_; \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif /* TPU_STATUS_H */
