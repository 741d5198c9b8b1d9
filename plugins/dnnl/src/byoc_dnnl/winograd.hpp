// Winograd F(4x4, 3x3) for the native shim's 3x3 stride-1 float32 convolutions (shim.cpp's
// lower_winograd): a 6x6 input tile per 4x4 output tile, so 36 multiplies per tile and channel
// pair where the direct convolution takes 144 (Lavin and Gray, "Fast Algorithms for
// Convolutional Neural Networks", 2015; the interpolation points 0, +-1, +-2 and infinity).
// The transforms are here; the 36 products of (tiles x C) by (C x K) matrices between them are one
// oneDNN batched matmul. Only this pure arithmetic lives in this file, none of the net's state.
//
// Layouts: a pixel's channels 16 at a time, contiguous (channels-last, C a multiple of 16, or
// oneDNN's nChw16c). The transforms use 16-float vectors and are compiled for AVX-512 only:
// the shim checks the CPU before choosing this path.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace byoc_wino {

constexpr int64_t TILE = 4, ALPHA = 6, POINTS = ALPHA * ALPHA;

// The points of a tile: 36 for F(4x4, 3x3), 6 for the 1-D F(4, 3) (a 3-tap Conv1d's: 6
// multiplies per 4 outputs where the direct convolution takes 12).
inline int64_t points(int dims) { return dims == 2 ? POINTS : ALPHA; }

// The weights (K, C, 3, 3) or (K, C, 3), row-major, as the matrices (C x K) the matmul reads, one
// per point: u[xi][c][k] = (G g G^T)[xi] (2-D) or (G g)[xi] (1-D) for g the kernel of output k
// and input c. In double: the transformed weights are rounded once.
inline std::vector<float> transform_weights(const float *w, int64_t K, int64_t C, int dims) {
    static const double G[ALPHA][3] = {{1 / 4., 0, 0},          {-1 / 6., -1 / 6., -1 / 6.},
                                       {-1 / 6., 1 / 6., -1 / 6.}, {1 / 24., 1 / 12., 1 / 6.},
                                       {1 / 24., -1 / 12., 1 / 6.}, {0, 0, 1}};
    std::vector<float> u((size_t)(points(dims) * C * K));
    for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < C; ++c) {
            if (dims == 1) {
                const float *g = w + (k * C + c) * 3;
                for (int a = 0; a < ALPHA; ++a)
                    u[(size_t)((a * C + c) * K + k)] =
                        (float)(G[a][0] * g[0] + G[a][1] * g[1] + G[a][2] * g[2]);
                continue;
            }
            const float *g = w + (k * C + c) * 9;
            double t[ALPHA][3];
            for (int a = 0; a < ALPHA; ++a)
                for (int j = 0; j < 3; ++j)
                    t[a][j] = G[a][0] * g[j] + G[a][1] * g[3 + j] + G[a][2] * g[6 + j];
            for (int a = 0; a < ALPHA; ++a)
                for (int b = 0; b < ALPHA; ++b)
                    u[(size_t)(((a * ALPHA + b) * C + c) * K + k)] =
                        (float)(t[a][0] * G[b][0] + t[a][1] * G[b][1] + t[a][2] * G[b][2]);
        }
    return u;
}

// Where a tensor's 16 channels from block cb start at pixel (y, x) of image i.
struct Plane {
    float *base;
    int64_t H, W, C;
    bool blocked;  // nChw16c; else channels-last
    float *at(int64_t i, int64_t cb, int64_t y, int64_t x) const {
        return blocked ? base + (((i * (C / 16) + cb) * H + y) * W + x) * 16
                       : base + ((i * H + y) * W + x) * C + cb * 16;
    }
};

// What follows the convolution, applied to each output vector in order (the net's post-ops).
struct Post {
    enum Kind { ADD, RELU, CLIP, LINEAR, LOGISTIC, SWISH, HARDSIGMOID, HARDSWISH } kind;
    // RELU: the negative slope; CLIP: [alpha, beta]; LINEAR: a*y+b; SWISH: y*sigmoid(a*y);
    // HARDSIGMOID: clamp(a*y+b, 0, 1); HARDSWISH: y*clamp(a*y+b, 0, 1) (oneDNN's eltwise algs)
    float alpha = 0, beta = 0;
};

struct Geometry {
    int dims;                               // 2: F(4x4, 3x3); 1: F(4, 3) (H and OH are 1)
    int64_t C, K, H, W, OH, OW, top, left;  // the source's and output's sizes, the padding
    int64_t tiles_w, per_image, tiles;      // tiles per output row, per image, in all
};

#define BYOC_WINO_TARGET __attribute__((target("avx512f")))
typedef float vf __attribute__((vector_size(64), aligned(4)));
typedef int32_t vi __attribute__((vector_size(64), aligned(4)));

BYOC_WINO_TARGET inline vf load(const float *p) {
    vf v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

BYOC_WINO_TARGET inline void store(float *p, vf v) { std::memcpy(p, &v, sizeof v); }

// exp(x), within 2 ulp of float32's: 2^n exp(r) with n = round(x / ln 2), |r| <= ln(2)/2, and
// Cephes' expf polynomial for exp(r); x clamped to [-87.3, 88] (2^n stays a normal float; 0
// and +inf are not reached), NaN kept.
BYOC_WINO_TARGET inline vf exp16(vf x) {
    x = x > 88.f ? 88.f : x;
    x = x < -87.3f ? -87.3f : x;
    vf n = __builtin_convertvector(__builtin_convertvector(x * 1.44269504f + 0.5f, vi), vf);
    n = n > x * 1.44269504f + 0.5f ? n - 1 : n;  // the conversion truncates: floor
    const vf r = x - n * 0.693359375f - n * -2.12194440e-4f;
    vf p = 1.9875691500e-4f * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.f;
    const vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
    vf scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

BYOC_WINO_TARGET inline vf sigmoid16(vf x) { return 1.f / (1.f + exp16(-x)); }

BYOC_WINO_TARGET inline vf clamp01(vf x) {
    x = x < 0.f ? 0.f : x;
    return x > 1.f ? 1.f : x;
}

// B^T applied to six vectors.
BYOC_WINO_TARGET inline void bt6(const vf d[6], vf r[6]) {
    r[0] = 4 * d[0] - 5 * d[2] + d[4];
    r[1] = -4 * (d[1] + d[2]) + d[3] + d[4];
    r[2] = 4 * (d[1] - d[2]) - d[3] + d[4];
    r[3] = 2 * (d[3] - d[1]) - d[2] + d[4];
    r[4] = 2 * (d[1] - d[3]) - d[2] + d[4];
    r[5] = 4 * d[1] - 5 * d[3] + d[5];
}

// A^T applied to six vectors: four.
BYOC_WINO_TARGET inline void at6(const vf m[6], vf r[4]) {
    const vf s12 = m[1] + m[2], d12 = m[1] - m[2], s34 = m[3] + m[4], d34 = m[3] - m[4];
    r[0] = m[0] + s12 + s34;
    r[1] = d12 + 2 * d34;
    r[2] = s12 + 4 * s34;
    r[3] = d12 + 8 * d34 + m[5];
}

// Tiles [t0, t0 + count) of the source into v: v[(xi * stride + t) * C + c], the points xi.
BYOC_WINO_TARGET inline void transform_input(const Geometry &g, const Plane &src, int64_t t0,
                                             int64_t count, int64_t stride, float *v) {
    const int64_t blocks = g.C / 16;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t t = 0; t < count; ++t)
        for (int64_t cb = 0; cb < blocks; ++cb) {
            const int64_t i = (t0 + t) / g.per_image, tile = (t0 + t) % g.per_image;
            const int64_t y0 = tile / g.tiles_w * TILE - g.top;
            const int64_t x0 = tile % g.tiles_w * TILE - g.left;
            vf d[6][6], col[6], r[6];
            if (g.dims == 1) {
                for (int b = 0; b < 6; ++b)
                    col[b] = x0 + b >= 0 && x0 + b < g.W ? load(src.at(i, cb, 0, x0 + b)) : vf{};
                bt6(col, r);
                for (int b = 0; b < 6; ++b) store(v + (b * stride + t) * g.C + cb * 16, r[b]);
                continue;
            }
            for (int a = 0; a < 6; ++a)
                for (int b = 0; b < 6; ++b) {
                    const int64_t y = y0 + a, x = x0 + b;
                    d[a][b] = y >= 0 && y < g.H && x >= 0 && x < g.W ? load(src.at(i, cb, y, x))
                                                                      : vf{};
                }
            vf rows[6][6];  // B^T d: column by column
            for (int b = 0; b < 6; ++b) {
                for (int a = 0; a < 6; ++a) col[a] = d[a][b];
                bt6(col, r);
                for (int a = 0; a < 6; ++a) rows[a][b] = r[a];
            }
            for (int a = 0; a < 6; ++a) {  // (B^T d) B: row by row
                bt6(rows[a], r);
                for (int b = 0; b < 6; ++b)
                    store(v + ((a * 6 + b) * stride + t) * g.C + cb * 16, r[b]);
            }
        }
}

// The post-ops applied to an output vector y at pixel (y0, x0) of channel block kb, image img
// (an ADD reads addend, in the destination's layout).
BYOC_WINO_TARGET inline vf finish(vf y, const std::vector<Post> &posts, const Plane &addend,
                                  int64_t img, int64_t kb, int64_t y0, int64_t x0) {
    for (const Post &p : posts) {
        if (p.kind == Post::ADD) {
            y += load(addend.at(img, kb, y0, x0));
        } else if (p.kind == Post::RELU) {
            y = y > 0 ? y : y * p.alpha;
        } else if (p.kind == Post::CLIP) {
            y = y < p.alpha ? p.alpha : y;
            y = y > p.beta ? p.beta : y;
        } else if (p.kind == Post::LINEAR) {
            y = y * p.alpha + p.beta;
        } else if (p.kind == Post::LOGISTIC) {
            y = sigmoid16(y);
        } else if (p.kind == Post::SWISH) {
            y = y * sigmoid16(y * p.alpha);
        } else if (p.kind == Post::HARDSIGMOID) {
            y = clamp01(y * p.alpha + p.beta);
        } else {
            y = y * clamp01(y * p.alpha + p.beta);
        }
    }
    return y;
}

// The matmul's products m (m[(xi * stride + t) * K + k]) of tiles [t0, t0 + count) back to
// output pixels, plus the bias, through the post-ops (finish), into dst.
BYOC_WINO_TARGET inline void transform_output(const Geometry &g, const float *m, int64_t t0,
                                              int64_t count, int64_t stride, const float *bias,
                                              const std::vector<Post> &posts, const Plane &addend,
                                              const Plane &dst) {
    const int64_t blocks = g.K / 16;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t t = 0; t < count; ++t)
        for (int64_t kb = 0; kb < blocks; ++kb) {
            const int64_t img = (t0 + t) / g.per_image, tile = (t0 + t) % g.per_image;
            const int64_t y0 = tile / g.tiles_w * TILE, x0 = tile % g.tiles_w * TILE;
            vf cols[4][6], six[6], r[4];
            const vf b0 = bias ? load(bias + kb * 16) : vf{};
            if (g.dims == 1) {
                for (int a = 0; a < 6; ++a) six[a] = load(m + (a * stride + t) * g.K + kb * 16);
                at6(six, r);
                for (int j = 0; j < 4 && x0 + j < g.OW; ++j)
                    store(dst.at(img, kb, 0, x0 + j),
                          finish(r[j] + b0, posts, addend, img, kb, 0, x0 + j));
                continue;
            }
            for (int b = 0; b < 6; ++b) {  // A^T m: column by column
                for (int a = 0; a < 6; ++a)
                    six[a] = load(m + ((a * 6 + b) * stride + t) * g.K + kb * 16);
                at6(six, r);
                for (int i = 0; i < 4; ++i) cols[i][b] = r[i];
            }
            for (int i = 0; i < 4 && y0 + i < g.OH; ++i) {
                at6(cols[i], r);  // (A^T m) A: row by row
                for (int j = 0; j < 4 && x0 + j < g.OW; ++j) {
                    const vf y = finish(r[j] + b0, posts, addend, img, kb, y0 + i, x0 + j);
                    store(dst.at(img, kb, y0 + i, x0 + j), y);
                }
            }
        }
}

}  // namespace byoc_wino
