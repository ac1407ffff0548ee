/* vec_consts.h: the constants of the vec.h exp and erf (vec_impl.h's v_exp, v_erf), in one
 * place for the two that compute them the same way: vec_impl.h, and the elementwise JIT
 * (ew_jit.c), which emits the same instructions so that its results are the vec.h loops'
 * bit for bit.
 *
 *   e^x, x clamped to [LO, HI]: t = x log2e + MAGIC (rounds x log2e to an integer n in t's
 *   low bits), nf = t - MAGIC, r = x - nf LN2_HI - nf LN2_LO (ln2 split so nf LN2_HI is
 *   exact), e^r = 1 + r + r^2 P(r) with P(r) = (((P0 r + P1) r + P2) r + P3) r + P4,
 *   scaled by 2^nf. */
#ifndef TPU_VTPU_KERNELS_VEC_CONSTS_H
#define TPU_VTPU_KERNELS_VEC_CONSTS_H

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

/* erf on 16 intervals of |x| (width 1/4, index k = floor(4|x|), |x| clamped to 4 - 1/128
 * where erf rounds to 1): k = 0 is x + x Q(x^2), k >= 1 is A_k + u P_k(u) with
 * u = 4|x| - (k + 1/2) in [-1/2, 1/2); Q and P_k of degree 4, one coefficient table
 * per power, looked up per lane. No branches and no exp. Row 0: A_k; rows 1-5: the
 * coefficients of u^1 .. u^5 (k >= 1) or of t^0 .. t^4 in Q(t), t = x^2 (k = 0). */
#define TPU_ERF_CLAMP 3.9921875f /* 4 - 1/128: |x| clamped to it (erf = 1 in f32 from 3.92) */

static const float tpu_erf_table[6][16] = {
    {0.000000000e+00f, 4.041168988e-01f, 6.232408881e-01f, 7.840750813e-01f,
     8.883882165e-01f, 9.481700659e-01f, 9.784437418e-01f, 9.919900298e-01f,
     9.973459840e-01f, 9.992170334e-01f, 9.997946024e-01f, 9.999521375e-01f,
     9.999901056e-01f, 9.999982119e-01f, 9.999997020e-01f, 9.999999404e-01f},
    {1.283791661e-01f, 2.450881898e-01f, 1.908748895e-01f, 1.311862618e-01f,
     7.956849039e-02f, 4.258994386e-02f, 2.011806518e-02f, 8.386456408e-03f,
     3.085205099e-03f, 1.001619385e-03f, 2.869687742e-04f, 7.255707169e-05f,
     1.618967144e-05f, 3.187935363e-06f, 5.539800441e-07f, 8.495559456e-08f},
    {-3.761263788e-01f, -2.297639661e-02f, -2.982404642e-02f, -2.869754843e-02f,
     -2.237828635e-02f, -1.464027259e-02f, -8.173332550e-03f, -3.930307459e-03f,
     -1.639421098e-03f, -5.937946262e-04f, -1.876181195e-04f, -5.189978037e-05f,
     -1.271901510e-05f, -3.542614650e-06f, -4.110341649e-07f, 4.554659370e-07f},
    {1.128377542e-01f, -3.669683821e-03f, -8.700488834e-04f, 1.451786258e-03f,
     2.538340632e-03f, 2.467791317e-03f, 1.794388518e-03f, 1.053784159e-03f,
     5.162117886e-04f, 2.145402832e-04f, 7.641183765e-05f, 2.347615191e-05f,
     6.249785656e-06f, 1.446409556e-06f, 2.917167876e-07f, 5.136720205e-08f},
    {-2.685899474e-02f, 6.452397211e-04f, 6.861937582e-04f, 4.406169755e-04f,
     1.088135978e-04f, -1.178719540e-04f, -1.918654598e-04f, -1.681896829e-04f,
     -1.014642912e-04f, -5.514638542e-05f, -2.409773151e-05f, -8.419462574e-06f,
     -1.923425316e-06f, 2.836144859e-06f, -4.869726808e-07f, -2.167370667e-06f},
    {5.092243664e-03f, 4.319953223e-05f, -2.592595229e-05f, -6.477881107e-05f,
     -5.983155643e-05f, -2.996823787e-05f, -2.194040235e-06f, 1.105049978e-05f,
     1.216473993e-05f, 8.160522157e-06f, 4.133675702e-06f, 1.685061420e-06f,
     5.696057883e-07f, 1.622967005e-07f, 3.938973592e-08f, 8.201687329e-09f},
};

#endif /* TPU_VTPU_KERNELS_VEC_CONSTS_H */
