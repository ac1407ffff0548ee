/* vec_exp_consts.h: the constants of the vec.h exp (vec_impl.h's v_exp), in one place for
 * the two that compute it the same way: vec_impl.h, and the elementwise JIT (ew_jit.c),
 * which emits the same instructions so that its results are the vec.h loop's bit for bit.
 *   e^x, x clamped to [LO, HI]: t = x log2e + MAGIC (rounds x log2e to an integer n in t's
 *   low bits), nf = t - MAGIC, r = x - nf LN2_HI - nf LN2_LO (ln2 split so nf LN2_HI is
 *   exact), e^r = 1 + r + r^2 P(r) with P(r) = (((P0 r + P1) r + P2) r + P3) r + P4,
 *   scaled by 2^nf. */
#ifndef TPU_VTPU_KERNELS_VEC_EXP_CONSTS_H
#define TPU_VTPU_KERNELS_VEC_EXP_CONSTS_H

#define TPU_EXP_HI 89.0f     /* above: the result rounds to inf */
#define TPU_EXP_LO (-104.0f) /* below: to 0 */
#define TPU_EXP_MAGIC 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer */
#define TPU_EXP_LOG2E 1.44269504088896341f
#define TPU_EXP_LN2_HI 0.693359375f
#define TPU_EXP_LN2_LO (-2.12194440e-4f)
#define TPU_EXP_P0 1.382102375e-03f
#define TPU_EXP_P1 8.368669078e-03f
#define TPU_EXP_P2 4.166826233e-02f
#define TPU_EXP_P3 1.666652113e-01f
#define TPU_EXP_P4 4.999999404e-01f

#endif /* TPU_VTPU_KERNELS_VEC_EXP_CONSTS_H */
