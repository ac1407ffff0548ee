/* status.c: the calling thread's last error message and the names of status codes.
 *
 * Each thread keeps one fixed buffer (TPU_STATUS_MESSAGE_CAP bytes, thread-local), so
 * setting an error never allocates and never fails; longer messages are truncated.
 */
#include "tpu/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char tls_message[TPU_STATUS_MESSAGE_CAP];

tpu_status_t tpu_status_set(tpu_status_t code, const char *fmt, ...) {
  /* Format into a scratch buffer first: an argument may be the current message
   * itself (re-raising with "%s", tpu_status_message()). */
  char scratch[TPU_STATUS_MESSAGE_CAP];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(scratch, sizeof(scratch), fmt, ap);
  va_end(ap);
  if (n < 0) scratch[0] = '\0';
  memcpy(tls_message, scratch, sizeof(tls_message));
  return code;
}

const char *tpu_status_message(void) { return tls_message; }

void tpu_status_clear(void) { tls_message[0] = '\0'; }

const char *tpu_status_name(tpu_status_t code) {
  switch (code) {
    case TPU_OK: return "OK";
    case TPU_ERR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case TPU_ERR_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case TPU_ERR_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case TPU_ERR_UNAVAILABLE: return "UNAVAILABLE";
    case TPU_ERR_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case TPU_ERR_DEVICE: return "DEVICE";
    case TPU_ERR_INTERNAL: return "INTERNAL";
    case TPU_STATUS_COUNT: break;
  }
  return "UNKNOWN_STATUS";
}
