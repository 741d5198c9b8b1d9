/* byoc-ccompiler prelude: branch-free float math that compilers vectorize.
 *
 * libm's expf/tanhf/erff/logf are scalar calls that stop a loop from vectorizing; these inline
 * versions are within a few ulp (erf: about 1e-7 absolute) and handle inf and NaN. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float byoc_bits_to_float(int32_t i) { float f; memcpy(&f, &i, 4); return f; }
static inline int32_t byoc_float_to_bits(float f) { int32_t i; memcpy(&i, &f, 4); return i; }

/* e^x: x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial, scale by 2^n through the exponent. */
static inline float byoc_exp(float x) {
  const float xc = x < -87.3365f ? -87.3365f : (x > 88.7228f ? 88.7228f : x);
  const float n0 = rintf(xc * 1.44269504088896341f);
  const float n = n0 > 127.0f ? 127.0f : n0;  /* 2^128 is not a float; r grows a little */
  float r = fmaf(n, -0.693145751953125f, xc);
  r = fmaf(n, -1.428606765330187045e-06f, r);
  float p = 1.9875691500e-4f;
  p = fmaf(p, r, 1.3981999507e-3f);
  p = fmaf(p, r, 8.3334519073e-3f);
  p = fmaf(p, r, 4.1665795894e-2f);
  p = fmaf(p, r, 1.6666665459e-1f);
  p = fmaf(p, r, 5.0000001201e-1f);
  p = fmaf(p * r, r, r) + 1.0f;
  const float y = p * byoc_bits_to_float(((int32_t)n + 127) << 23);
  return x != x ? x : (x > 88.7228f ? INFINITY : (x < -87.3365f ? 0.0f : y));
}

/* ln x: x = m 2^e with m in [sqrt(1/2), sqrt(2)), polynomial in m - 1 (Cephes logf). */
static inline float byoc_log(float x) {
  const int32_t bits = byoc_float_to_bits(x);
  int32_t e = ((bits >> 23) & 0xff) - 126;
  float m = byoc_bits_to_float((bits & 0x007fffff) | 0x3f000000); /* in [0.5, 1) */
  const int small = m < 0.707106781186547524f;
  e -= small;
  m = small ? m + m - 1.0f : m - 1.0f;
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = fmaf(y, m, -1.1514610310e-1f);
  y = fmaf(y, m, 1.1676998740e-1f);
  y = fmaf(y, m, -1.2420140846e-1f);
  y = fmaf(y, m, 1.4249322787e-1f);
  y = fmaf(y, m, -1.6668057665e-1f);
  y = fmaf(y, m, 2.0000714765e-1f);
  y = fmaf(y, m, -2.4999993993e-1f);
  y = fmaf(y, m, 3.3333331174e-1f);
  y = y * m * z;
  const float fe = (float)e;
  y = fmaf(fe, -2.12194440e-4f, y);
  y = fmaf(z, -0.5f, y);
  const float r = fmaf(fe, 0.693359375f, m + y);
  /* zero, negatives, subnormals, inf and NaN take the slow path's answers */
  return x > 1.17549435e-38f && x < INFINITY ? r
       : (x == 0.0f ? -INFINITY : (x == INFINITY ? x : (x > 0.0f ? logf(x) : NAN)));
}

/* tanh: odd rational approximation on [-7.9, 7.9] (as in Eigen and MLAS); +-1 beyond. */
static inline float byoc_tanh(float x) {
  const float xc = x < -7.90531110763549805f ? -7.90531110763549805f
                 : (x > 7.90531110763549805f ? 7.90531110763549805f : x);
  const float x2 = xc * xc;
  float p = -2.76076847742355e-16f;
  p = fmaf(x2, p, 2.00018790482477e-13f);
  p = fmaf(x2, p, -8.60467152213735e-11f);
  p = fmaf(x2, p, 5.12229709037114e-08f);
  p = fmaf(x2, p, 1.48572235717979e-05f);
  p = fmaf(x2, p, 6.37261928875436e-04f);
  p = fmaf(x2, p, 4.89352455891786e-03f);
  p = xc * p;
  float q = 1.19825839466702e-06f;
  q = fmaf(x2, q, 1.18534705686654e-04f);
  q = fmaf(x2, q, 2.26843463243900e-03f);
  q = fmaf(x2, q, 4.89352518554385e-03f);
  const float r = (x < 4e-4f && x > -4e-4f) ? x
                : (x >= 7.90531110763549805f ? 1.0f : (x <= -7.90531110763549805f ? -1.0f : p / q));
  return x != x ? x : r;
}

/* erf: Taylor series below 0.5, else 1 - erfc with Numerical Recipes' erfc (rel. err 1.2e-7). */
static inline float byoc_erf(float x) {
  const float a = fabsf(x);
  const float x2 = x * x;
  float s = 1.646211437e-06f;  /* 2/sqrt(pi) (-1)^n / (n! (2n+1)), n = 8 .. 0 */
  s = fmaf(s, x2, -1.492565036e-05f);
  s = fmaf(s, x2, 1.205533298e-04f);
  s = fmaf(s, x2, -8.548327023e-04f);
  s = fmaf(s, x2, 5.223977625e-03f);
  s = fmaf(s, x2, -2.686617065e-02f);
  s = fmaf(s, x2, 1.128379167e-01f);
  s = fmaf(s, x2, -3.761263890e-01f);
  s = fmaf(s, x2, 1.128379167f);
  const float small = x * s;
  const float t = 1.0f / fmaf(0.5f, a < 10.0f ? a : 10.0f, 1.0f);
  float p = 0.17087277f;
  p = fmaf(p, t, -0.82215223f);
  p = fmaf(p, t, 1.48851587f);
  p = fmaf(p, t, -1.13520398f);
  p = fmaf(p, t, 0.27886807f);
  p = fmaf(p, t, -0.18628806f);
  p = fmaf(p, t, 0.09678418f);
  p = fmaf(p, t, 0.37409196f);
  p = fmaf(p, t, 1.00002368f);
  p = fmaf(p, t, -1.26551223f);
  const float ac = a < 10.0f ? a : 10.0f;
  const float erfc = t * byoc_exp(fmaf(-ac, ac, p));
  const float big = copysignf(1.0f - erfc, x);
  return x != x ? x : (a < 0.5f ? small : big);
}

static inline float byoc_sigmoid(float x) { return 1.0f / (1.0f + byoc_exp(-x)); }

/* log(1 + e^x) without overflow */
static inline float byoc_softplus(float x) {
  return (x > 0.0f ? x : 0.0f) + byoc_log(1.0f + byoc_exp(-fabsf(x)));
}

static inline float byoc_clamp01(float x) {
  x = x < 0.0f ? 0.0f : x;
  return x > 1.0f ? 1.0f : x;
}
