/* ew_tile.h: small transposing gathers for the elementwise kernels (internal).
 *
 * After a transpose, an operand's inner (output-order) dim is strided while the next dim
 * out is contiguous in it: the iterator's 2-d segments then read one element per cache
 * line per row. tpu_ew_tile_gather copies such a tile into row-major order reading along
 * the operand's contiguous direction, so the vector loops run on dense rows afterwards
 * (binary.c on a buffer, copy_fill.c straight into the output).
 */
#ifndef TPU_VTPU_KERNELS_EW_TILE_H
#define TPU_VTPU_KERNELS_EW_TILE_H

#include <stddef.h>
#include <stdint.h>

/* dst[r * ld + c] = src[r * s_row + c * s_col] for r < rows, c < cols: elements of |size|
 * bytes (1, 2, 4 or 8), byte strides s_row and s_col, ld in elements. Reads run along r
 * when s_row == size (the transposed case), else along c. dst and src must not overlap. */
void tpu_ew_tile_gather(size_t size, void *dst, int64_t ld, const char *src, int64_t s_row,
                        int64_t s_col, int64_t rows, int64_t cols);

/* Whether a segment operand with element step |s| and row step |outer| (bytes) is the
 * transposed case the gather is for: strided along the row, contiguous across rows. */
static inline int tpu_ew_tile_is_transposed(size_t size, int64_t s, int64_t outer) {
  return outer == (int64_t)size && s != (int64_t)size && s != 0;
}

#endif /* TPU_VTPU_KERNELS_EW_TILE_H */
