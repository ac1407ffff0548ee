/* ew_tile.c: the transposing tile gather of ew_tile.h.
 *
 * Element moves go through typed loads and stores of fixed size (memcpy of 1, 2, 4 or 8
 * bytes, which compiles to one move), in 8 x 8 sub-blocks so that both the rows read and
 * the rows written stay within a few cache lines at a time.
 */
#include "vtpu/kernels/ew_tile.h"

#include <string.h>

#define TILE_SUB 8

#define TILE_GATHER(T)                                                              \
  do {                                                                              \
    T *d = dst;                                                                     \
    if (s_row == (int64_t)sizeof(T)) { /* contiguous down the rows: strips of */  \
      /* TILE_SUB columns walked down r touch TILE_SUB lines of src at a time */      \
      for (int64_t c0 = 0; c0 < cols; c0 += TILE_SUB) {                             \
        int64_t c1 = c0 + TILE_SUB < cols ? c0 + TILE_SUB : cols;                   \
        for (int64_t r = 0; r < rows; r++) {                                        \
          for (int64_t c = c0; c < c1; c++) {                                       \
            T v;                                                                    \
            memcpy(&v, src + r * s_row + c * s_col, sizeof v);                      \
            d[r * ld + c] = v;                                                      \
          }                                                                         \
        }                                                                           \
      }                                                                             \
    } else {                                                                        \
      for (int64_t r = 0; r < rows; r++) {                                          \
        for (int64_t c = 0; c < cols; c++) {                                        \
          T v;                                                                      \
          memcpy(&v, src + r * s_row + c * s_col, sizeof v);                        \
          d[r * ld + c] = v;                                                        \
        }                                                                           \
      }                                                                             \
    }                                                                               \
  } while (0)

void tpu_ew_tile_gather(size_t size, void *dst, int64_t ld, const char *src, int64_t s_row,
                        int64_t s_col, int64_t rows, int64_t cols) {
  switch (size) {
    case 1: TILE_GATHER(uint8_t); break;
    case 2: TILE_GATHER(uint16_t); break;
    case 4: TILE_GATHER(uint32_t); break;
    default: TILE_GATHER(uint64_t); break;
  }
}
