// Bilinear upsampling into a partition's plain NCHW output (shim.cpp's resize_outputs): what
// oneDNN's resampling_linear computes (half-pixel centres, edges clamped), read from the
// channels-last or nChw16c source the net holds and written straight into the caller's array.
// oneDNN writes the source's layout, and a segmentation net's last op, 21 classes upsampled 8x
// to 512x512, then took 1.4 ms to resample and 2.2 ms to reorder its 22 MB into NCHW.
//
// Each output row of a channel blends two source rows, then 16 outputs at a time pick their
// two source columns out of one 16-float vector (a permute, no gather): an upsampling's 16
// outputs span at most 16 source columns, which the plan checks. AVX-512 only: the shim checks
// the CPU before choosing this path. Only this pure arithmetic lives in this file.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "winograd.hpp"  // its 16-float vector types, load and store, and AVX-512 target

namespace byoc_resize {

using byoc_wino::vf;
using byoc_wino::vi;

constexpr int64_t V = 16;  // floats per vector

// Per output coordinate along one axis: the two source coordinates and the second's weight,
// as oneDNN's reference computes them (resampling_utils.hpp).
struct Axis {
    std::vector<int32_t> lo, hi;
    std::vector<float> w;
};

inline Axis axis(int64_t in, int64_t out) {
    Axis a;
    for (int64_t o = 0; o < out; ++o) {
        const float s = ((float)o + 0.5f) * (float)in / (float)out - 0.5f;
        a.lo.push_back((int32_t)std::max<int64_t>((int64_t)std::floor(s), 0));
        a.hi.push_back((int32_t)std::min<int64_t>((int64_t)std::ceil(s), in - 1));
        a.w.push_back(std::fabs(s - (float)(int64_t)s));
    }
    return a;
}

struct Plan {
    int64_t N = 0, C = 0, IH = 0, IW = 0, OH = 0, OW = 0;
    bool blocked = false;  // nChw16c; else channels-last
    Axis ys;
    std::vector<int32_t> base;    // per 16 outputs along x: the first source column they read
    std::vector<int32_t> i0, i1;  // per output column: its two source columns, from base
    std::vector<float> wx;        // per output column: the second column's weight
    int64_t row() const { return IW + V; }  // a source row's floats in the plane (padded)
};

// The plan, or false when some 16 outputs along x read more than 16 source columns (a
// downsampling, or less than 1.07x up).
inline bool make_plan(Plan &p) {
    p.ys = axis(p.IH, p.OH);
    const Axis xs = axis(p.IW, p.OW);
    for (int64_t x0 = 0; x0 < p.OW; x0 += V) {
        const int32_t b = xs.lo[(size_t)x0];
        p.base.push_back(b);
        for (int64_t x = x0; x < std::min(x0 + V, p.OW); ++x) {
            if (xs.hi[(size_t)x] - b >= V) return false;
            p.i0.push_back(xs.lo[(size_t)x] - b);
            p.i1.push_back(xs.hi[(size_t)x] - b);
            p.wx.push_back(xs.w[(size_t)x]);
        }
    }
    p.i0.resize((size_t)(p.base.size() * V), 0);
    p.i1.resize(p.i0.size(), 0);
    p.wx.resize(p.i0.size(), 0.f);
    return true;
}

// src (one image per N) -> dst [N, C, OH, OW]; plane: C x IH rows of row() floats (scratch).
BYOC_WINO_TARGET inline void run(const Plan &p, const float *src, float *plane, float *dst) {
    const int64_t C = p.C, IH = p.IH, IW = p.IW, OH = p.OH, OW = p.OW, R = p.row();
    const int64_t CB = (C + V - 1) / V, blocks = (int64_t)p.base.size();
    for (int64_t i = 0; i < p.N; ++i) {
#pragma omp parallel for
        for (int64_t y = 0; y < IH; ++y)
            for (int64_t x = 0; x < IW; ++x)
                for (int64_t c = 0; c < C; ++c) {
                    const int64_t at = p.blocked ? (((i * CB + c / V) * IH + y) * IW + x) * V + c % V
                                                 : ((i * IH + y) * IW + x) * C + c;
                    plane[(c * IH + y) * R + x] = src[at];
                }
#pragma omp parallel
        {
            std::vector<float> v((size_t)R, 0.f);
#pragma omp for
            for (int64_t cy = 0; cy < C * OH; ++cy) {
                const int64_t c = cy / OH, oy = cy % OH;
                const float *r0 = plane + (c * IH + p.ys.lo[(size_t)oy]) * R;
                const float *r1 = plane + (c * IH + p.ys.hi[(size_t)oy]) * R;
                const float wy = p.ys.w[(size_t)oy];
                for (int64_t x = 0; x < IW; ++x) v[(size_t)x] = r0[x] + wy * (r1[x] - r0[x]);
                float *out = dst + ((i * C + c) * OH + oy) * OW;
                for (int64_t b = 0; b < blocks; ++b) {
                    const vf s = byoc_wino::load(v.data() + p.base[(size_t)b]);
                    const vf w = byoc_wino::load(p.wx.data() + b * V);
                    vi k0, k1;
                    std::memcpy(&k0, p.i0.data() + b * V, sizeof k0);
                    std::memcpy(&k1, p.i1.data() + b * V, sizeof k1);
                    const vf a = __builtin_shuffle(s, k0), e = __builtin_shuffle(s, k1);
                    const vf r = a + w * (e - a);
                    if (b + 1 < blocks || OW % V == 0)
                        byoc_wino::store(out + b * V, r);
                    else
                        std::memcpy(out + b * V, &r, (size_t)(OW % V) * sizeof(float));
                }
            }
        }
    }
}

}  // namespace byoc_resize
