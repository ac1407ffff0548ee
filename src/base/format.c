/* format.c: human-readable byte counts for messages ("512 B", "1.50 GiB"). */
#include <stdio.h>

#include "tpu/caching_allocator.h"

const char *tpu_format_bytes(uint64_t bytes, char *buf, size_t buf_size) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (!buf || buf_size == 0) return buf;
  if (bytes < 1024) {
    snprintf(buf, buf_size, "%llu B", (unsigned long long)bytes);
    return buf;
  }
  double v = (double)bytes / 1024.0;
  size_t u = 0;
  while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
    v /= 1024.0;
    u++;
  }
  snprintf(buf, buf_size, "%.2f %s", v, units[u]);
  return buf;
}
