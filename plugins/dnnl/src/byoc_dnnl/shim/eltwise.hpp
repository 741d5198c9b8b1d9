// The eltwise family's C++ half (byoc_dnnl/kinds/eltwise.py): eltwise, erf and lut, and the
// erf and lookup-table steps.
#pragma once

#include "net.hpp"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>  // lut_vbmi, lut_avx2
#endif

namespace {

void lower_eltwise(Net &n, const Op &op) {
    if (op.ins.size() != 1 || op.ip.size() != 1 || op.fp.size() != 2) fail("bad eltwise op");
    int a = op.ins[0];
    check_value(n, a, "eltwise src");
    if (n.values[a].dims != n.values[op.out].dims) fail("eltwise: shapes differ");
    memory::desc md = n.values[a].md;
    if (eltwise_alg(op.ip[0]) == algorithm::eltwise_tanh) {  // plain where blocked is ref
        auto pd = fast_layout(md, plain(n.values[a].dims), [&](const memory::desc &m) {
            return tanh_as_binary(n.eng, m, plain_attr());
        });
        a = ensure_md(n, a, pd.src_desc(0));
        set_out(n, op.out, pd.dst_desc());
        n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
        push(n, binary(pd), {{DNNL_ARG_SRC_0, a}, {DNNL_ARG_SRC_1, a}, {DNNL_ARG_DST, op.out}});
        return;
    }
    auto pd = eltwise_forward::primitive_desc(n.eng, prop_kind::forward_inference,
                                              eltwise_alg(op.ip[0]), md, md, op.fp[0], op.fp[1],
                                              plain_attr());
    set_out(n, op.out, pd.dst_desc());
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    push(n, eltwise_forward(pd), {{DNNL_ARG_SRC, a}, {DNNL_ARG_DST, op.out}});
}

// erf(x) as a rational function of x clamped to [-4, 4] (Eigen's single-precision erf
// coefficients). The clamp works on the bits (|x| as an integer: float comparisons may trap,
// so a compiler keeps them as branches), which keeps the loop branch-free for OpenMP's simd
// directive; NaN stays NaN. Within 4.5e-7 of erf, 2.5e-7 relative near 0 (against double
// std::erf at 2M points over [-6, 6]). std::erf, a libm call per element, took 0.31 ms for
// 128 x 1536 values on two Zen 4 cores, this 0.11 ms (a QDQ MiniLM's GELU, whose Erf the
// quantizer sets apart, has three).
void run_erf(Net &n, Arena &a, size_t i) {
    const memory &src = a.mems[n.steps[i].a], &dst = a.mems[n.steps[i].b];
    const float *x = (const float *)src.get_data_handle();
    float *y = (float *)dst.get_data_handle();
    int64_t count = (int64_t)(src.get_desc().get_size() / sizeof(float));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < count; ++i) {
        uint32_t b;
        std::memcpy(&b, &x[i], sizeof b);
        const uint32_t mag = b & 0x7fffffffu, four = 0x40800000u;  // |x|, 4.0f
        const uint32_t c = (b & 0x80000000u) | (mag < four || mag > 0x7f800000u ? mag : four);
        float v;
        std::memcpy(&v, &c, sizeof v);
        const float v2 = v * v;
        float p = -2.72614225801306e-10f;
        p = p * v2 + 2.77068142495902e-08f;
        p = p * v2 - 2.10102402082508e-06f;
        p = p * v2 - 5.69250639462346e-05f;
        p = p * v2 - 7.34990630326855e-04f;
        p = p * v2 - 2.95459980854025e-03f;
        p = p * v2 - 1.60960333262415e-02f;
        float q = -1.45660718464996e-05f;
        q = q * v2 - 2.13374055278905e-04f;
        q = q * v2 - 1.68282697438203e-03f;
        q = q * v2 - 7.37332916720468e-03f;
        q = q * v2 - 1.42647390514189e-02f;
        y[i] = v * p / q;
    }
}

void lower_erf(Net &n, const Op &op) {
    if (op.ins.size() != 1) fail("bad erf op");
    int a = op.ins[0];
    check_value(n, a, "erf src");
    if (n.values[a].dims != n.values[op.out].dims) fail("erf: shapes differ");
    set_out(n, op.out, n.values[a].md);
    Step s;
    s.run = run_erf;
    s.a = a;
    s.b = op.out;
    n.steps.push_back(s);
}

// dst[i] = table[src[i] ^ flip] over a dense u8 or s8 tensor (flip 0x80: an s8 source, whose
// -128 is entry 0). Scalar: about one value per cycle and core (AMD Zen 4).
template <class T>
void lut_scalar(const uint8_t *__restrict x, T *__restrict y, const T *__restrict table,
                int64_t count, uint8_t flip) {
    for (int64_t i = 0; i < count; ++i) y[i] = table[(uint8_t)(x[i] ^ flip)];
}

#if defined(__x86_64__) && defined(__GNUC__)
// A u8 or s8 table with AVX-512 VBMI: two 128-entry permutes per 64 values, picked by each
// value's top bit. 11x the scalar loop on AMD Zen 4 (410k values: 10 us against 116 us).
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void lut_vbmi(
    const uint8_t *x, uint8_t *y, const uint8_t *table, int64_t count, uint8_t flip) {
    const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    const __m512i f = _mm512_set1_epi8((char)flip);
    int64_t i = 0;
    for (; i + 64 <= count; i += 64) {
        const __m512i v = _mm512_xor_si512(_mm512_loadu_si512(x + i), f);
        const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1);
        const __m512i hi = _mm512_permutex2var_epi8(t2, v, t3);
        _mm512_storeu_si512(y + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
    }
    lut_scalar(x + i, y + i, table, count - i, flip);
}

// With AVX2: sixteen 16-entry byte shuffles per 32 values, one per high nibble; a value whose
// high nibble is not the shuffle's gets an index with its top bit set (x ^ 16j, plus 0x70
// saturated), which the shuffle turns into 0. 1.5x the scalar loop on AMD Zen 4.
__attribute__((target("avx2"))) void lut_avx2(const uint8_t *x, uint8_t *y, const uint8_t *table,
                                              int64_t count, uint8_t flip) {
    __m256i t[16];
    for (int j = 0; j < 16; ++j)
        t[j] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table + 16 * j)));
    const __m256i f = _mm256_set1_epi8((char)flip), bias = _mm256_set1_epi8(0x70);
    int64_t i = 0;
    for (; i + 64 <= count; i += 64) {
        const __m256i v0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + i)), f);
        const __m256i v1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + i + 32)), f);
        __m256i r0 = _mm256_setzero_si256(), r1 = _mm256_setzero_si256();
        for (int j = 0; j < 16; ++j) {
            const __m256i k = _mm256_set1_epi8((char)(j << 4));
            r0 = _mm256_or_si256(r0, _mm256_shuffle_epi8(t[j], _mm256_adds_epu8(_mm256_xor_si256(v0, k), bias)));
            r1 = _mm256_or_si256(r1, _mm256_shuffle_epi8(t[j], _mm256_adds_epu8(_mm256_xor_si256(v1, k), bias)));
        }
        _mm256_storeu_si256((__m256i *)(y + i), r0);
        _mm256_storeu_si256((__m256i *)(y + i + 32), r1);
    }
    lut_scalar(x + i, y + i, table, count - i, flip);
}

// The u8 table loop this CPU runs best: 2 VBMI, 1 AVX2, 0 scalar. BYOC_DNNL_LUT_ISA (vbmi,
// avx2 or scalar) caps it, as ONEDNN_MAX_CPU_ISA caps oneDNN: to measure what a CPU without
// VBMI gets.
int lut_isa() {
    static const int isa = [] {
        int best = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw") ? 2
                   : __builtin_cpu_supports("avx2")                                          ? 1
                                                                                             : 0;
        const char *cap = std::getenv("BYOC_DNNL_LUT_ISA");
        if (cap && std::strcmp(cap, "avx2") == 0) best = std::min(best, 1);
        if (cap && std::strcmp(cap, "scalar") == 0) best = 0;
        return best;
    }();
    return isa;
}
#else
void lut_vbmi(const uint8_t *x, uint8_t *y, const uint8_t *table, int64_t count, uint8_t flip) {
    lut_scalar(x, y, table, count, flip);
}
void lut_avx2(const uint8_t *x, uint8_t *y, const uint8_t *table, int64_t count, uint8_t flip) {
    lut_scalar(x, y, table, count, flip);
}
int lut_isa() { return 0; }
#endif

void run_lut(Net &n, Arena &a, size_t i) {
    const Step &s = n.steps[i];
    const memory &src = a.mems[s.a], &dst = a.mems[s.b], &table = a.mems[s.c];
    const uint8_t *x = (const uint8_t *)src.get_data_handle();
    const int64_t count = (int64_t)src.get_desc().get_size();
    const uint8_t flip = src.get_desc().get_data_type() == dt::s8 ? 0x80 : 0;
    const bool f32 = dst.get_desc().get_data_type() == dt::f32;
    const int isa = f32 ? 0 : lut_isa();
    char *y = (char *)dst.get_data_handle();
    const void *t = table.get_data_handle();
    // Chunks of 4 KiB values per thread; a small table job stays on one thread.
    const int64_t per = isa == 2 ? 1 << 18 : 1 << 15, chunks = (count + 4095) / 4096;
    const int threads = (int)std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), count / per));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t at = c * 4096, m = std::min<int64_t>(4096, count - at);
        const uint8_t *u8 = (const uint8_t *)t;
        if (f32) lut_scalar(x + at, (float *)y + at, (const float *)t, m, flip);
        else if (isa == 2) lut_vbmi(x + at, (uint8_t *)y + at, u8, m, flip);
        else if (isa == 1) lut_avx2(x + at, (uint8_t *)y + at, u8, m, flip);
        else lut_scalar(x + at, (uint8_t *)y + at, u8, m, flip);
    }
}

// A lookup table (lut.py): each u8 or s8 value of the source, in its dense layout, picks one of
// 256 entries (s8: -128 first), written as float32, u8 or s8 in the same layout. The table
// comes as a float32 constant; a u8 or s8 one must hold integers of its type's range.
void lower_lut(Net &n, const Op &op) {
    if (op.ins.size() != 2 || op.ip.size() != 1) fail("bad lut op");
    int a = op.ins[0], t = op.ins[1];
    check_value(n, a, "lut src");
    check_value(n, t, "lut table");
    const dims_t d = n.values[a].dims;
    if (d != n.values[op.out].dims) fail("lut: shapes differ");
    const dt src_t = n.values[a].md.get_data_type(), out_t = dst_type(op.ip[0]);
    if (src_t != dt::u8 && src_t != dt::s8) fail("lut: the source must be u8 or s8");
    {
        const Value &tv = n.values[t];
        if (tv.kind != CONST || tv.alias_of >= 0 || tv.dims != dims_t{256} || tv.md != plain(tv.dims))
            fail("lut: the table must be a constant of 256 float32 values");
    }
    int64_t count = 1;
    for (auto x : d) count *= x;
    const memory::desc md = n.values[a].md;
    if (md.get_inner_nblks() != 0 || md.get_padded_dims() != d || md.get_size() != (size_t)count)
        a = ensure_md(n, a, retyped(n, plain(d), src_t));
    // The table in the destination's type, made once.
    int typed = zeros(n, memory::desc({256}, out_t, tag::a));
    const float *from = (const float *)n.values[t].data.get();
    char *to = n.values[typed].data.get();
    for (int i = 0; i < 256; ++i) {
        const float v = from[i];
        if (out_t == dt::f32) {
            std::memcpy(to + 4 * i, &v, 4);
            continue;
        }
        const float lo = out_t == dt::u8 ? 0.f : -128.f, hi = out_t == dt::u8 ? 255.f : 127.f;
        if (!(v >= lo && v <= hi) || v != std::nearbyint(v)) fail("lut: a table entry is not in the type's range");
        if (out_t == dt::u8) ((uint8_t *)to)[i] = (uint8_t)v;
        else ((int8_t *)to)[i] = (int8_t)v;
    }
    set_out(n, op.out, retyped(n, n.values[a].md, out_t));
    Step s;
    s.run = run_lut;
    s.a = a;
    s.b = op.out;
    s.c = typed;
    n.steps.push_back(s);
}

}  // namespace
