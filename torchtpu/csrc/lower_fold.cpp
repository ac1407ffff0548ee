// lower_fold.cpp: lowerings of im2col and col2im (F.unfold / F.fold, nn.Unfold / nn.Fold:
// patch embeddings, sliding-window attention, convolution written by hand), forward and
// backward: ATen's derivatives make each one the other's backward. Also unfold_backward
// (Tensor.unfold's backward, torch.istft's overlap-add).
//
// With (B, C, H, W) images (B = 1 when unbatched), kernel (kh, kw), dilation d, padding p,
// stride s, the image padded with p zeros on both sides is (B * C, Hp * Wp), Hp = H + 2 p,
// and block (oh, ow) of L = OH * OW blocks reads, at tap k = a * kw + b of K = kh * kw,
// padded pixel
//   (a d_h + oh s_h) * Wp + (b d_w + ow s_w)
// computed once in the graph as a (K * L) i64 index from iotas. Then
//   im2col   one gather of those pixels:          (B * C, K * L) -> (B, C * K, L)
//   col2im   one scatter-add of the columns back:  (B * C, Hp * Wp), the padding cropped
// The scatter adds the taps of a pixel in tap order, as the CPU kernel does; bf16/f16 sums
// accumulate in f32 and round once. Bad arguments are checked by the CPU kernel's own shape
// checks (ATen's im2col_shape_check.h), so they raise its messages.
#include <ATen/core/Tensor.h>
#include <ATen/native/im2col_shape_check.h>

#include <vector>

#include "native.h"

namespace torchtpu {
namespace {

struct Blocks {
  int64_t k[2], d[2], p[2], s[2];
  int64_t image[2];   // H, W
  int64_t blocks[2];  // OH, OW: blocks per dim
  int64_t planes;     // B * C
};

void pair(const c10::IValue &v, int64_t out[2]) {
  std::vector<int64_t> l = v.toIntVector();
  out[0] = l[0];
  out[1] = l.size() > 1 ? l[1] : l[0];
}

// kernel_size, dilation, padding, stride from argument |at| on; image (H, W) and planes.
Blocks blocks_args(const LowerCtx &ctx, size_t at, const int64_t image[2], int64_t planes) {
  Blocks b{};
  pair(ctx.arg(at), b.k);
  pair(ctx.arg(at + 1), b.d);
  pair(ctx.arg(at + 2), b.p);
  pair(ctx.arg(at + 3), b.s);
  b.planes = planes;
  for (int i = 0; i < 2; i++) {
    b.image[i] = image[i];
    b.blocks[i] = (image[i] + 2 * b.p[i] - (b.d[i] * (b.k[i] - 1) + 1)) / b.s[i] + 1;
  }
  if (b.blocks[0] <= 0 || b.blocks[1] <= 0) throw Unsupported("no blocks");
  return b;
}

// Sets an empty result (no planes: a batch of 0) and says so; gathers need an operand.
bool empty_result(LowerCtx &ctx) {
  tpu_shape_t out = ctx.out_shape();
  if (numel(out) != 0) return false;
  ctx.results = {full(ctx.g, ctx.out_dtype(), out, 0)};
  return true;
}

// (K * L) i64: the flat padded-image pixel each tap of each block reads (see the top).
tpu_value_t block_pixels(tpu_graph_t *g, const Blocks &b) {
  tpu_shape_t s{4, {b.k[0], b.k[1], b.blocks[0], b.blocks[1]}};
  auto iota = [&](int dim, int64_t scale) {
    return tpu_graph_binary(g, TPU_OP_MUL, tpu_graph_iota(g, TPU_I64, &s, dim), full(g, TPU_I64, s, static_cast<double>(scale)));
  };
  tpu_value_t row = tpu_graph_binary(g, TPU_OP_ADD, iota(0, b.d[0]), iota(2, b.s[0]));
  tpu_value_t col = tpu_graph_binary(g, TPU_OP_ADD, iota(1, b.d[1]), iota(3, b.s[1]));
  const int64_t wp = b.image[1] + 2 * b.p[1];
  tpu_value_t idx = tpu_graph_binary(g, TPU_OP_ADD, tpu_graph_binary(g, TPU_OP_MUL, row, full(g, TPU_I64, s, static_cast<double>(wp))), col);
  tpu_shape_t flat{1, {numel(s)}};
  return tpu_graph_reshape(g, idx, &flat);
}

// im2col(self, kernel_size, dilation, padding, stride): (B, C, H, W) or (C, H, W) ->
// (B, C * K, L) or (C * K, L)
void im2col(LowerCtx &ctx) {
  if (empty_result(ctx)) return;
  tpu_value_t x = ctx.v(0);
  tpu_shape_t xs = shape_of(ctx.g, x);
  const int64_t *image = xs.dims + xs.rank - 2;
  Blocks b = blocks_args(ctx, 1, image, numel(xs) / (image[0] * image[1]));
  tpu_shape_t planes{3, {b.planes, image[0], image[1]}};
  int64_t lo[3] = {0, b.p[0], b.p[1]}, interior[3] = {0, 0, 0};
  x = tpu_graph_pad(ctx.g, tpu_graph_reshape(ctx.g, x, &planes), scalar_const(ctx.g, dtype_of(ctx.g, x), 0), lo, lo,
                    interior);  // (B * C, Hp, Wp)
  tpu_shape_t flat{2, {b.planes, (image[0] + 2 * b.p[0]) * (image[1] + 2 * b.p[1])}};
  tpu_value_t cols = gather_slices(ctx.g, tpu_graph_reshape(ctx.g, x, &flat), 1, block_pixels(ctx.g, b));
  tpu_shape_t out = ctx.out_shape();
  ctx.results = {tpu_graph_reshape(ctx.g, cols, &out)};  // (B * C, K * L) is (B, C * K, L)
}

// col2im(self, output_size, kernel_size, dilation, padding, stride): (B, C * K, L) or
// (C * K, L) -> (B, C, H, W) or (C, H, W)
void col2im(LowerCtx &ctx) {
  if (empty_result(ctx)) return;
  tpu_dtype_t dt = compute_dtype(ctx.out_dtype());
  tpu_shape_t out = ctx.out_shape();
  const int64_t *image = out.dims + out.rank - 2;
  Blocks b = blocks_args(ctx, 2, image, numel(out) / (image[0] * image[1]));
  const int64_t hp = image[0] + 2 * b.p[0], wp = image[1] + 2 * b.p[1];
  tpu_shape_t cols_shape{2, {b.planes, numel(shape_of(ctx.g, ctx.v(0))) / b.planes}};
  tpu_value_t cols = tpu_graph_reshape(ctx.g, convert(ctx.g, ctx.v(0), dt), &cols_shape);  // (B * C, K * L)
  tpu_shape_t flat{2, {b.planes, hp * wp}};
  tpu_value_t img = scatter_slices(ctx.g, full(ctx.g, dt, flat, 0), 1, block_pixels(ctx.g, b),
                                   dim_first(ctx.g, cols, 1), true);
  tpu_shape_t padded{3, {b.planes, hp, wp}};
  int64_t crop[3] = {0, -b.p[0], -b.p[1]}, interior[3] = {0, 0, 0};
  img = tpu_graph_pad(ctx.g, tpu_graph_reshape(ctx.g, img, &padded), scalar_const(ctx.g, dt, 0), crop, crop, interior);
  ctx.results = {tpu_graph_reshape(ctx.g, img, &out)};
}

// im2col(self, kernel_size, dilation, padding, stride): the CPU kernel's own shape checks,
// so that bad arguments raise its messages (the meta kernel words them differently).
void im2col_check(const std::vector<c10::IValue> &args) {
  int64_t k[2], d[2], p[2], s[2];
  for (auto [at, v] : {std::pair<size_t, int64_t *>{1, k}, {2, d}, {3, p}, {4, s}}) pair(args[at], v);
  at::native::im2col_shape_check(args[0].toTensor(), at::Tensor(), k[0], k[1], d[0], d[1], p[0], p[1], s[0], s[1]);
}

// col2im(self, output_size, kernel_size, dilation, padding, stride): as im2col_check.
void col2im_check(const std::vector<c10::IValue> &args) {
  int64_t o[2], k[2], d[2], p[2], s[2];
  for (auto [at, v] : {std::pair<size_t, int64_t *>{1, o}, {2, k}, {3, d}, {4, p}, {5, s}}) pair(args[at], v);
  at::native::col2im_shape_check(args[0].toTensor(), at::Tensor(), o[0], o[1], k[0], k[1], d[0], d[1], p[0], p[1], s[0],
                                 s[1]);
}

// unfold_backward(grad_in, input_sizes, dim, size, step): Tensor.unfold's backward, the
// overlap-add of windows (torch.istft's): window w's element j adds into position
// w * step + j of |dim|. grad_in is |input_sizes| with |dim| replaced by the W windows,
// plus a trailing dim of |size|; one scatter-add of its (W * size) slices.
void unfold_backward(LowerCtx &ctx) {
  tpu_graph_t *g = ctx.g;
  tpu_value_t grad = ctx.v(0);
  tpu_shape_t gs = shape_of(g, grad), out = ctx.out_shape(0);
  const int rank = out.rank;
  const int64_t dim = wrap_dim(ctx.arg(2).toInt(), rank), size = ctx.arg(3).toInt();
  const int64_t step = ctx.arg(4).toInt(), windows = rank ? gs.dims[dim] : 1;
  if (rank == 0) throw Unsupported("unfold_backward of a 0-d tensor");
  // (..., W at dim, ..., size) -> (W, size, the other dims in order) -> (W * size, ...)
  int64_t perm[TPU_MAX_RANK];
  int k = 0;
  perm[k++] = dim;
  perm[k++] = rank;
  for (int d = 0; d < rank; d++) {
    if (d != dim) perm[k++] = d;
  }
  tpu_value_t moved = tpu_graph_transpose(g, grad, perm);
  tpu_shape_t flat = shape_of(g, moved);
  flat.dims[1] *= flat.dims[0];
  for (int d = 0; d < flat.rank - 1; d++) flat.dims[d] = flat.dims[d + 1];
  flat.rank--;
  tpu_value_t updates = tpu_graph_reshape(g, moved, &flat);
  tpu_shape_t ws{}, line{};
  ws.rank = 2, ws.dims[0] = windows, ws.dims[1] = size;
  line.rank = 1, line.dims[0] = windows * size;
  tpu_value_t index = tpu_graph_binary(
      g, TPU_OP_ADD,
      tpu_graph_binary(g, TPU_OP_MUL, tpu_graph_iota(g, TPU_I64, &ws, 0), full(g, TPU_I64, ws, step)),
      tpu_graph_iota(g, TPU_I64, &ws, 1));
  index = tpu_graph_reshape(g, index, &line);
  tpu_value_t zeros = full(g, dtype_of(g, grad), out, 0.0);
  ctx.results = {scatter_slices(g, zeros, dim, index, updates, true)};
}

[[maybe_unused]] const bool checks_registered =
    (register_presize("im2col", im2col_check), register_presize("im2col.out", im2col_check),
     register_presize("col2im", col2im_check), register_presize("col2im.out", col2im_check), true);

LoweringRegistrar registrar({
    {"im2col", im2col},
    {"im2col.out", im2col},
    {"col2im", col2im},
    {"col2im.out", col2im},
    {"unfold_backward", unfold_backward},
    {"unfold_backward.out", unfold_backward},
});

}  // namespace
}  // namespace torchtpu
