/* ew_tile.c: the transposing tile gather of ew_tile.h.
 *
 * 32-bit elements read down the rows go through vec.h's transpose_u32 (8 x 8 register
 * transposes where the CPU has AVX2). Other element moves go through typed loads and
 * stores of fixed size (memcpy of 1, 2, 4 or 8 bytes, which compiles to one move). Reading
 * down the rows (the transposed case), the tile is walked in strips of TILE_SUB columns,
 * so that the rows read and the rows written each stay within TILE_SUB cache lines at a
 * time; otherwise it is one strip of all columns.
 */
#include "vtpu/kernels/ew_tile.h"

#include <string.h>

#include "vtpu/kernels/vec.h"

#define TILE_SUB 8

#define TILE_GATHER(T)                                                               \
  do {                                                                               \
    T *d = dst;                                                                      \
    const int64_t strip = s_row == (int64_t)sizeof(T) ? TILE_SUB : cols;             \
    for (int64_t c0 = 0; c0 < cols; c0 += strip) {                                   \
      int64_t c1 = c0 + strip < cols ? c0 + strip : cols;                            \
      for (int64_t r = 0; r < rows; r++) {                                           \
        for (int64_t c = c0; c < c1; c++) {                                          \
          T v;                                                                       \
          memcpy(&v, src + r * s_row + c * s_col, sizeof v);                         \
          d[r * ld + c] = v;                                                         \
        }                                                                            \
      }                                                                              \
    }                                                                                \
  } while (0)

void tpu_ew_tile_gather(size_t size, void *dst, int64_t ld, const char *src, int64_t s_row,
                        int64_t s_col, int64_t rows, int64_t cols) {
  if (size == 4 && s_row == 4 && s_col % 4 == 0 && (uintptr_t)src % 4 == 0 &&
      (uintptr_t)dst % 4 == 0) { /* f32 and friends: the vector transposes of vec.h */
    tpu_vec_ops()->transpose_u32(dst, ld, (const uint32_t *)(const void *)src, s_col / 4, rows,
                                 cols);
    return;
  }
  switch (size) {
    case 1: TILE_GATHER(uint8_t); break;
    case 2: TILE_GATHER(uint16_t); break;
    case 4: TILE_GATHER(uint32_t); break;
    default: TILE_GATHER(uint64_t); break;
  }
}
