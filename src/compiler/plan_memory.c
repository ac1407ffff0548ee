/* plan_memory.c: the memory planning pass (plan_memory.h).
 *
 * Buffers are visited in the order they are written. The live set is kept sorted by
 * offset; buffers whose last read comes before the new buffer's write leave it, then the
 * new buffer takes the first gap between live buffers that is large enough (or the end).
 */
#include <string.h>

#include "compiler/plan_memory.h"

tpu_status_t tpu_plan_memory(plan_buffer_t *buffers, int n, tpu_allocator_t host,
                             size_t *out_peak, size_t *out_total) {
  size_t peak = 0, total = 0;
  int *live = NULL; /* indices of live buffers, by increasing offset */
  int num_live = 0;
  if (n > 0) {
    TPU_RETURN_IF_ERROR(
        tpu_allocator_calloc(host, (size_t)n, sizeof *live, "plan_memory", (void **)&live));
  }
  for (int i = 0; i < n; i++) {
    plan_buffer_t *b = &buffers[i];
    if (!tpu_size_add(total, b->bytes, &total) || (i > 0 && b->first < buffers[i - 1].first)) {
      tpu_allocator_free(host, live);
      return tpu_status_set(TPU_ERR_INTERNAL, "plan_memory: scratch size overflows or "
                            "buffers out of order");
    }
    int k = 0;
    for (int j = 0; j < num_live; j++) {
      if (buffers[live[j]].last >= b->first) live[k++] = live[j];
    }
    num_live = k;
    size_t offset = 0;
    int at = 0;
    for (; at < num_live; at++) {
      const plan_buffer_t *o = &buffers[live[at]];
      if (o->offset >= offset && o->offset - offset >= b->bytes) break;
      if (o->offset + o->bytes > offset) offset = o->offset + o->bytes;
    }
    b->offset = offset;
    memmove(&live[at + 1], &live[at], sizeof *live * (size_t)(num_live - at));
    live[at] = i;
    num_live++;
    if (offset + b->bytes > peak) peak = offset + b->bytes;
  }
  tpu_allocator_free(host, live);
  *out_peak = peak;
  *out_total = total;
  return TPU_OK;
}
