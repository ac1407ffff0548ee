// lower_fft.cpp: torch.fft on the vTPU (aten::_fft_r2c, _fft_c2r, _fft_c2c, which every
// torch.fft function, torch.stft and torch.istft call) as DFT matmuls on the MXU, at
// HIGHEST precision whatever torch.tpu.precision says (one bf16 pass would leave a
// transform with 1e-2 errors), one dim at a time: the dim moved last, one dot_general with
// a block of twiddle factors, moved back. A transform of length n costs 4 n m
// multiply-adds per signal (m outputs); lengths above kSplitAbove split as n1 n2 (the
// four-step algorithm, two rounds of shorter products); lengths with no such split above
// kMaxLength (a prime, or a prime factor above it) become a convolution of twice the
// length or more, transformed by the splits (Bluestein's algorithm).
//
// Complex values are (real, imaginary) pairs (IrLayout): a complex DFT is one product of
// [re | im] (..., 2n) with [[C, -S], [S, C]] (forward; its transpose's signs for the
// inverse), where C and S hold cos and sin of 2 pi j k / n. The twiddles come from one
// table of the n angles 2 pi p / n (p exact: j k mod n in integers), computed in f64 and
// rounded once, gathered into the (n, m) blocks.
#include <cmath>

#include "lower_complex.h"

namespace torchtpu {
namespace {

constexpr int64_t kMaxLength = 1024;  // the longest transform as one product
constexpr int64_t kSplitAbove = 128;  // longer ones split when they have a factor
constexpr double kPi = 3.14159265358979323846;

tpu_shape_t shape2(int64_t a, int64_t b) {
  tpu_shape_t s{};
  s.rank = 2;
  s.dims[0] = a;
  s.dims[1] = b;
  return s;
}

tpu_shape_t shape1(int64_t a) {
  tpu_shape_t s{};
  s.rank = 1;
  s.dims[0] = a;
  return s;
}

// (rows, cols) blocks cos(2 pi r c / n) and sin(2 pi r c / n) in |dt|.
std::pair<tpu_value_t, tpu_value_t> twiddles(tpu_graph_t *g, int64_t rows, int64_t cols,
                                             int64_t n, tpu_dtype_t dt) {
  const tpu_shape_t rc = shape2(rows, cols), flat = shape1(rows * cols), table = shape1(n);
  tpu_value_t p = tpu_graph_binary(g, TPU_OP_MUL, tpu_graph_iota(g, TPU_I64, &rc, 0),
                                   tpu_graph_iota(g, TPU_I64, &rc, 1));
  p = tpu_graph_reshape(g, tpu_graph_binary(g, TPU_OP_REM, p, full(g, TPU_I64, rc, n)), &flat);
  tpu_value_t angle = tpu_graph_binary(g, TPU_OP_MUL,
                                       convert(g, tpu_graph_iota(g, TPU_I64, &table, 0), TPU_F64),
                                       full(g, TPU_F64, table, 2.0 * kPi / static_cast<double>(n)));
  auto block = [&](tpu_op_t f) {
    tpu_value_t t = convert(g, tpu_graph_unary(g, f, angle), dt);
    return tpu_graph_reshape(g, gather_slices(g, t, 0, p), &rc);
  };
  return {block(TPU_OP_COS), block(TPU_OP_SIN)};
}

tpu_value_t cat(tpu_graph_t *g, tpu_value_t a, tpu_value_t b, int dim) {
  const tpu_value_t xs[2] = {a, b};
  return tpu_graph_concatenate(g, xs, 2, dim);
}

tpu_value_t neg(tpu_graph_t *g, tpu_value_t x) { return tpu_graph_unary(g, TPU_OP_NEG, x); }

// x (..., K) times block (K, N): (..., N), at HIGHEST precision.
tpu_value_t times(tpu_graph_t *g, tpu_value_t x, tpu_value_t block) {
  tpu_dot_attrs_t d{};
  d.num_contract = 1;
  d.lhs_contract[0] = shape_of(g, x).rank - 1;
  d.rhs_contract[0] = 0;
  d.precision = TPU_PRECISION_HIGHEST;
  return tpu_graph_dot_general(g, x, block, &d, dtype_of(g, x));
}

// Entries [start, start + n) of |x|'s last dim.
tpu_value_t last_slice(tpu_graph_t *g, tpu_value_t x, int64_t start, int64_t n) {
  tpu_shape_t s = shape_of(g, x);
  int64_t lo[TPU_MAX_RANK] = {}, hi[TPU_MAX_RANK], st[TPU_MAX_RANK];
  for (int d = 0; d < s.rank; d++) hi[d] = s.dims[d], st[d] = 1;
  lo[s.rank - 1] = start;
  hi[s.rank - 1] = start + n;
  return tpu_graph_slice(g, x, lo, hi, st);
}

// A transform along one dim: the value with |dim| (of |rank|) moved last, then back.
struct MoveLast {
  tpu_graph_t *g;
  int rank, dim;
  int64_t perm[TPU_MAX_RANK], back[TPU_MAX_RANK];
  MoveLast(tpu_graph_t *g_, int rank_, int dim_) : g(g_), rank(rank_), dim(dim_) {
    for (int i = 0, k = 0; i < rank; i++) {
      if (i != dim) perm[k++] = i;
    }
    perm[rank - 1] = dim;
    for (int i = 0; i < rank; i++) back[perm[i]] = i;
  }
  tpu_value_t in(tpu_value_t v) const { return tpu_graph_transpose(g, v, perm); }
  tpu_value_t out(tpu_value_t v) const { return tpu_graph_transpose(g, v, back); }
};

using Parts = std::pair<tpu_value_t, tpu_value_t>;

// The transposed value of |v|'s last two dims.
tpu_value_t swap_last_two(tpu_graph_t *g, tpu_value_t v) {
  const int rank = shape_of(g, v).rank;
  int64_t perm[TPU_MAX_RANK];
  for (int i = 0; i < rank; i++) perm[i] = i;
  std::swap(perm[rank - 2], perm[rank - 1]);
  return tpu_graph_transpose(g, v, perm);
}

tpu_value_t reshaped(tpu_graph_t *g, tpu_value_t v, const tpu_shape_t &s) {
  return tpu_graph_reshape(g, v, &s);
}

// The factor n1 of n with n1, n / n1 <= kMaxLength closest to sqrt(n), or 0.
int64_t split_length(int64_t n) {
  int64_t best = 0;
  for (int64_t n1 = 2; n1 <= kMaxLength; n1++) {
    if (n % n1 == 0 && n / n1 <= kMaxLength &&
        (!best || std::llabs(n1 * n1 - n) < std::llabs(best * best - n))) {
      best = n1;
    }
  }
  return best;
}

// Complex DFT along the last dim (length n -> n), forward (e^-i) or inverse (e^+i). Up to
// kSplitAbove (or kMaxLength, for a length with no factors) one product with the twiddle
// block; longer lengths n = n1 n2 by the four-step algorithm (input j = n2 j1 + j2, output
// k = k1 + n1 k2): length-n1 transforms of the columns, a twiddle factor
// e^(-+2 pi i k1 j2 / n), length-n2 transforms of the rows, the (n1, n2) result read
// transposed. A split does 4 n (n1 + n2) multiply-adds instead of 4 n^2.
Parts bluestein_last(tpu_graph_t *g, tpu_value_t re, tpu_value_t im, bool forward);

Parts dft_last(tpu_graph_t *g, tpu_value_t re, tpu_value_t im, bool forward) {
  const tpu_shape_t shape = shape_of(g, re);
  const int rank = shape.rank;
  const int64_t n = shape.dims[rank - 1];
  const tpu_dtype_t dt = dtype_of(g, re);
  const int64_t n1 = n > kSplitAbove ? split_length(n) : 0, n2 = n1 ? n / n1 : 0;
  if (!n1 || rank >= TPU_MAX_RANK) {
    if (n > kMaxLength && rank < TPU_MAX_RANK) return bluestein_last(g, re, im, forward);
    if (n > kMaxLength) throw Unsupported("fft length without a split");
    auto [c, s] = twiddles(g, n, n, n, dt);
    tpu_value_t top = forward ? cat(g, c, neg(g, s), 1) : cat(g, c, s, 1);
    tpu_value_t bottom = forward ? cat(g, s, c, 1) : cat(g, neg(g, s), c, 1);
    tpu_value_t y = times(g, cat(g, re, im, rank - 1), cat(g, top, bottom, 0));
    return {last_slice(g, y, 0, n), last_slice(g, y, n, n)};
  }
  tpu_shape_t grid = shape;  // (..., n1, n2)
  grid.dims[rank - 1] = n1;
  grid.dims[rank] = n2;
  grid.rank++;
  // columns: (..., n2, n1) transforms of length n1, back to (..., k1, j2)
  auto [br, bi] = dft_last(g, swap_last_two(g, reshaped(g, re, grid)),
                           swap_last_two(g, reshaped(g, im, grid)), forward);
  br = swap_last_two(g, br);
  bi = swap_last_two(g, bi);
  // twiddles (k1, j2): (re + i im)(c -+ i s)
  auto [c, s] = twiddles(g, n1, n2, n, dt);
  tpu_value_t cb = broadcast_to(g, c, grid), sb = broadcast_to(g, s, grid);
  auto mul = [&](tpu_value_t a, tpu_value_t b) { return tpu_graph_binary(g, TPU_OP_MUL, a, b); };
  auto add = [&](tpu_value_t a, tpu_value_t b) { return tpu_graph_binary(g, TPU_OP_ADD, a, b); };
  auto sub = [&](tpu_value_t a, tpu_value_t b) { return tpu_graph_binary(g, TPU_OP_SUB, a, b); };
  tpu_value_t tr = forward ? add(mul(br, cb), mul(bi, sb)) : sub(mul(br, cb), mul(bi, sb));
  tpu_value_t ti = forward ? sub(mul(bi, cb), mul(br, sb)) : add(mul(bi, cb), mul(br, sb));
  // rows: transforms of length n2 -> (..., k1, k2), read as k = k1 + n1 k2
  auto [yr, yi] = dft_last(g, tr, ti, forward);
  return {reshaped(g, swap_last_two(g, yr), shape), reshaped(g, swap_last_two(g, yi), shape)};
}

// The longest Bluestein transform: its convolution (a power of two, at least 2n - 1) must
// split into two products of at most kMaxLength.
constexpr int64_t kMaxBluestein = kMaxLength * kMaxLength / 2;

// The chirp w_j = e^(i pi j^2 / n), j in [0, n), as (cos, sin) in |dt|; j^2 mod 2n in
// integers, the angle in f64, rounded once.
Parts chirp(tpu_graph_t *g, int64_t n, tpu_dtype_t dt) {
  const tpu_shape_t s = shape1(n);
  tpu_value_t j = tpu_graph_iota(g, TPU_I64, &s, 0);
  tpu_value_t p = tpu_graph_binary(g, TPU_OP_REM, tpu_graph_binary(g, TPU_OP_MUL, j, j),
                                   full(g, TPU_I64, s, 2 * n));
  tpu_value_t angle = tpu_graph_binary(g, TPU_OP_MUL, convert(g, p, TPU_F64),
                                       full(g, TPU_F64, s, kPi / static_cast<double>(n)));
  return {convert(g, tpu_graph_unary(g, TPU_OP_COS, angle), dt),
          convert(g, tpu_graph_unary(g, TPU_OP_SIN, angle), dt)};
}

// (ar + i ai)(br + i bi), b broadcast to a's shape (lower_complex.h's product)
Parts cmul(tpu_graph_t *g, Parts a, Parts b) {
  const tpu_shape_t s = shape_of(g, a.first);
  Cx p = Cew{{g, dtype_of(g, a.first), s}}.mul(
      {a.first, a.second}, {broadcast_to(g, b.first, s), broadcast_to(g, b.second, s)});
  return {p.re, p.im};
}

// |x|'s last dim padded with zeros to |m|
tpu_value_t pad_last(tpu_graph_t *g, tpu_value_t x, int64_t m) {
  const tpu_shape_t s = shape_of(g, x);
  int64_t lo[TPU_MAX_RANK] = {}, hi[TPU_MAX_RANK] = {}, in[TPU_MAX_RANK] = {};
  hi[s.rank - 1] = m - s.dims[s.rank - 1];
  return tpu_graph_pad(g, x, scalar_const(g, dtype_of(g, x), 0), lo, hi, in);
}

// Bluestein's algorithm: with jk = (j^2 + k^2 - (k - j)^2) / 2, the DFT of length n is
// X_k = c_k sum_j (x_j c_j) conj(c_{k-j}) for the chirp c = w (inverse) or conj(w)
// (forward): a convolution, done circularly at a power-of-two length m >= 2n - 1 by two
// forward transforms, a product and an inverse transform (each split in four steps). The
// kernel's transform is of constants, which the compiler folds.
Parts bluestein_last(tpu_graph_t *g, tpu_value_t re, tpu_value_t im, bool forward) {
  const tpu_shape_t shape = shape_of(g, re);
  const int rank = shape.rank;
  const int64_t n = shape.dims[rank - 1];
  const tpu_dtype_t dt = dtype_of(g, re);
  if (n > kMaxBluestein) throw Unsupported("fft length without a split");
  int64_t m = 1;
  while (m < 2 * n - 1) m *= 2;
  auto [wc, ws] = chirp(g, n, dt);
  Parts c{wc, forward ? neg(g, ws) : ws}, kernel{wc, forward ? ws : neg(g, ws)};
  auto [ar, ai] = cmul(g, {re, im}, c);
  // the kernel conj(c_d) at d = 0 .. n-1 and at m - d for d = 1 .. n-1 (d = k - j < 0)
  auto wrap = [&](tpu_value_t v) {
    tpu_value_t tail = last_slice(g, v, 1, n - 1);
    const bool rev[1] = {true};
    return cat(g, pad_last(g, v, m - n + 1), tpu_graph_reverse(g, tail, rev), 0);
  };
  Parts kf = dft_last(g, wrap(kernel.first), wrap(kernel.second), true);
  Parts af = dft_last(g, pad_last(g, ar, m), pad_last(g, ai, m), true);
  Parts prod = cmul(g, af, kf);
  auto [yr, yi] = dft_last(g, prod.first, prod.second, false);
  // the inverse transform is unnormalized: divide by m, then keep the first n
  tpu_value_t inv_m = full(g, dt, shape_of(g, yr), 1.0 / static_cast<double>(m));
  yr = last_slice(g, tpu_graph_binary(g, TPU_OP_MUL, yr, inv_m), 0, n);
  yi = last_slice(g, tpu_graph_binary(g, TPU_OP_MUL, yi, inv_m), 0, n);
  return cmul(g, {yr, yi}, c);
}

// Complex DFT along |dim|.
Parts c2c_dim(tpu_graph_t *g, tpu_value_t re, tpu_value_t im, int dim, bool forward) {
  MoveLast m(g, shape_of(g, re).rank, dim);
  auto [yr, yi] = dft_last(g, m.in(re), m.in(im), forward);
  return {m.out(yr), m.out(yi)};
}

// Scales both parts by the normalization (0 none, 1 1/sqrt(N), 2 1/N; N = |count|).
void normalize(tpu_graph_t *g, tpu_value_t &re, tpu_value_t *im, int64_t norm, double count) {
  if (norm == 0) return;
  double k = norm == 1 ? 1.0 / std::sqrt(count) : 1.0 / count;
  tpu_value_t scale = full(g, dtype_of(g, re), shape_of(g, re), k);
  re = tpu_graph_binary(g, TPU_OP_MUL, re, scale);
  if (im) *im = tpu_graph_binary(g, TPU_OP_MUL, *im, scale);
}

std::vector<int> dims_of(LowerCtx &ctx, size_t i, int rank) {
  std::vector<int> dims;
  for (int64_t d : ctx.arg(i).toIntList().vec()) dims.push_back(static_cast<int>(wrap_dim(d, rank)));
  return dims;
}

tpu_dtype_t component_of(const at::Tensor &meta) {
  return meta.scalar_type() == at::kComplexDouble ? TPU_F64 : TPU_F32;
}

void set_pair(LowerCtx &ctx, tpu_value_t re, tpu_value_t im) {
  ctx.results = {complex_join(ctx.g, re, im)};
}

// _fft_c2c(self, dim, normalization, forward)
void fft_c2c(LowerCtx &ctx) {
  tpu_graph_t *g = ctx.g;
  tpu_dtype_t dt = component_of(ctx.out_meta[0]);
  tpu_value_t v = convert(g, ctx.v(0), dt);
  tpu_value_t re = complex_part(g, v, 0), im = complex_part(g, v, 1);
  const int rank = shape_of(g, re).rank;
  double count = 1;
  for (int d : dims_of(ctx, 1, rank)) {
    count *= static_cast<double>(shape_of(g, re).dims[d]);
    std::tie(re, im) = c2c_dim(g, re, im, d, ctx.arg(3).toBool());
  }
  normalize(g, re, &im, ctx.arg(2).toInt(), count);
  set_pair(ctx, re, im);
}

// _fft_r2c(self, dim, normalization, onesided): the real transform along the last of
// |dim| (n -> n / 2 + 1 when onesided), complex ones along the others
void fft_r2c(LowerCtx &ctx) {
  tpu_graph_t *g = ctx.g;
  tpu_dtype_t dt = component_of(ctx.out_meta[0]);
  tpu_value_t x = convert(g, ctx.v(0), dt);
  const int rank = shape_of(g, x).rank;
  std::vector<int> dims = dims_of(ctx, 1, rank);
  if (dims.empty()) throw Unsupported("r2c over no dims");
  const int last = dims.back();
  const int64_t n = shape_of(g, x).dims[last];
  const int64_t m = ctx.arg(3).toBool() ? n / 2 + 1 : n;
  MoveLast ml(g, rank, last);
  tpu_value_t re, im;
  if (n <= kSplitAbove) {
    auto [c, s] = twiddles(g, n, m, n, dt);
    tpu_value_t y = times(g, ml.in(x), cat(g, c, neg(g, s), 1));
    re = ml.out(last_slice(g, y, 0, m));
    im = ml.out(last_slice(g, y, m, m));
  } else {  // the complex transform of (x, 0) (it may split), its first m outputs
    tpu_value_t xr = ml.in(x);
    auto [yr, yi] = dft_last(g, xr, full(g, dt, shape_of(g, xr), 0.0), true);
    re = ml.out(last_slice(g, yr, 0, m));
    im = ml.out(last_slice(g, yi, 0, m));
  }
  double count = static_cast<double>(n);
  for (size_t i = 0; i + 1 < dims.size(); i++) {
    count *= static_cast<double>(shape_of(g, re).dims[dims[i]]);
    std::tie(re, im) = c2c_dim(g, re, im, dims[i], true);
  }
  normalize(g, re, &im, ctx.arg(2).toInt(), count);
  set_pair(ctx, re, im);
}

// A c2r along the last dim longer than kSplitAbove: the whole spectrum of n values from the half (X_k for
// k >= m is conj X_(n-k); the imaginary parts of X_0 and X_(n/2) ignored), its inverse
// complex transform's real part.
tpu_value_t long_c2r(tpu_graph_t *g, tpu_value_t re, tpu_value_t im, int64_t n) {
  const int64_t m = n / 2 + 1;
  tpu_shape_t s = shape_of(g, re);
  const int rank = s.rank;
  const tpu_dtype_t dt = dtype_of(g, re);
  // imaginary parts of k = 0 and k = n / 2 (even n) zeroed
  tpu_value_t k = tpu_graph_iota(g, TPU_I64, &s, rank - 1);
  tpu_value_t edge = tpu_graph_compare(g, TPU_CMP_EQ, k, full(g, TPU_I64, s, 0));
  if (n % 2 == 0) {
    edge = tpu_graph_binary(g, TPU_OP_OR, edge,
                            tpu_graph_compare(g, TPU_CMP_EQ, k, full(g, TPU_I64, s, n / 2)));
  }
  im = tpu_graph_select(g, edge, full(g, dt, s, 0.0), im);
  // the mirrored half: index n - k for k in [m, n)
  const tpu_shape_t rest = shape1(n - m);
  tpu_value_t idx = tpu_graph_binary(g, TPU_OP_SUB, full(g, TPU_I64, rest, n),
                                     tpu_graph_binary(g, TPU_OP_ADD, tpu_graph_iota(g, TPU_I64, &rest, 0),
                                                      full(g, TPU_I64, rest, m)));
  auto mirrored = [&](tpu_value_t v) { return gather_slices(g, v, rank - 1, idx); };
  tpu_value_t full_re = cat(g, re, mirrored(re), rank - 1);
  tpu_value_t full_im = cat(g, im, neg(g, mirrored(im)), rank - 1);
  return dft_last(g, full_re, full_im, false).first;
}

// _fft_c2r(self, dim, normalization, last_dim_size): inverse complex transforms along all
// but the last of |dim|, then the Hermitian half spectrum (m = n / 2 + 1 values) of the
// last to n = last_dim_size real values: x_j = sum_k w_k (Re X_k cos - Im X_k sin)(2 pi j
// k / n), w_k = 1 for k = 0 (and k = n / 2 for even n), 2 otherwise; the imaginary parts of
// those two are multiplied by sin(0) and sin(pi j) and so ignored, as pocketfft does
void fft_c2r(LowerCtx &ctx) {
  tpu_graph_t *g = ctx.g;
  tpu_dtype_t dt = ctx.out_meta[0].scalar_type() == at::kDouble ? TPU_F64 : TPU_F32;
  tpu_value_t v = convert(g, ctx.v(0), dt);
  tpu_value_t re = complex_part(g, v, 0), im = complex_part(g, v, 1);
  const int rank = shape_of(g, re).rank;
  std::vector<int> dims = dims_of(ctx, 1, rank);
  if (dims.empty()) throw Unsupported("c2r over no dims");
  double count = 1;
  for (size_t i = 0; i + 1 < dims.size(); i++) {
    count *= static_cast<double>(shape_of(g, re).dims[dims[i]]);
    std::tie(re, im) = c2c_dim(g, re, im, dims[i], false);
  }
  const int last = dims.back();
  const int64_t n = ctx.arg(3).toInt(), m = n / 2 + 1;
  if (n < 1) throw Unsupported("fft length");
  if (shape_of(g, re).dims[last] < m) throw Unsupported("c2r of a short half spectrum");
  MoveLast ml(g, rank, last);
  re = last_slice(g, ml.in(re), 0, m);
  im = last_slice(g, ml.in(im), 0, m);
  if (n > kSplitAbove) {
    ctx.results = {ml.out(long_c2r(g, re, im, n))};
    normalize(g, ctx.results[0], nullptr, ctx.arg(2).toInt(), count * static_cast<double>(n));
    return;
  }
  auto [c, s] = twiddles(g, m, n, n, dt);  // rows k, columns j
  // w_k per row: 2, with 1 for k = 0 and for k = n / 2 of an even n
  const tpu_shape_t mn = shape2(m, n);
  tpu_value_t k = tpu_graph_iota(g, TPU_I64, &mn, 0);
  tpu_value_t single = tpu_graph_compare(g, TPU_CMP_EQ, k, full(g, TPU_I64, mn, 0));
  if (n % 2 == 0) {
    single = tpu_graph_binary(g, TPU_OP_OR, single,
                              tpu_graph_compare(g, TPU_CMP_EQ, k, full(g, TPU_I64, mn, n / 2)));
  }
  tpu_value_t w = tpu_graph_select(g, single, full(g, dt, mn, 1.0), full(g, dt, mn, 2.0));
  tpu_value_t block = cat(g, tpu_graph_binary(g, TPU_OP_MUL, w, c),
                          neg(g, tpu_graph_binary(g, TPU_OP_MUL, w, s)), 0);
  tpu_value_t x = ml.out(times(g, cat(g, re, im, rank - 1), block));
  normalize(g, x, nullptr, ctx.arg(2).toInt(), count * static_cast<double>(n));
  ctx.results = {x};
}

[[maybe_unused]] const bool registered = [] {
  const std::pair<const char *, LowerFn> ops[] = {
      {"_fft_c2c", fft_c2c}, {"_fft_c2c.out", fft_c2c},
      {"_fft_r2c", fft_r2c}, {"_fft_r2c.out", fft_r2c},
      {"_fft_c2r", fft_c2r}, {"_fft_c2r.out", fft_c2r},
  };
  for (const auto &[op, fn] : ops) register_complex_lowering(op, fn);
  return true;
}();

}  // namespace
}  // namespace torchtpu
