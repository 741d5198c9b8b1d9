// layouts.hpp: what both of byoc-dnnl's native libraries use (shim.cpp, the JSON runtime;
// kernels.cpp, the C source mode's kernel library): memory descriptors, the test for oneDNN's
// slow kernels, lookups in the algorithm tables, and safe_softmax's NaN -> 0 pass. It reads namespace byoc_ops, generated from
// ops.py, which native.source() puts in front of both files.

#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace byoc_dnnl {

// Dense row-major float32: ONNX's layout.
inline dnnl::memory::desc plain(const dnnl::memory::dims &d) {
    dnnl::memory::dims strides(d.size());
    int64_t s = 1;
    for (int i = (int)d.size() - 1; i >= 0; --i) {
        strides[i] = s;
        s *= d[i];
    }
    return dnnl::memory::desc(d, dnnl::memory::data_type::f32, strides);
}

// Dense float32 with `axis` innermost, the other dims outside it in their order (a transpose).
inline dnnl::memory::desc innermost(const dnnl::memory::dims &d, int axis) {
    if (axis < 0 || axis >= (int)d.size())
        throw std::runtime_error("a layout with dim " + std::to_string(axis) +
                                 " innermost needs rank " + std::to_string(axis + 1) + " or more");
    dnnl::memory::dims strides(d.size());
    int64_t s = d[axis];
    strides[axis] = 1;
    for (int i = (int)d.size() - 1; i >= 0; --i)
        if (i != axis) {
            strides[i] = s;
            s *= d[i];
        }
    return dnnl::memory::desc(d, dnnl::memory::data_type::f32, strides);
}

// Dense float32 with the channels (dim 1) innermost: NWC, NHWC, NDHWC.
inline dnnl::memory::desc channels_last(const dnnl::memory::dims &d) { return innermost(d, 1); }

// Whether dense layers compute in bf16 by their operands' types: oneDNN 3.2 honours fpmath =
// bf16 only with AMX (elsewhere its f32 kernels run), but has bf16 matmuls wherever the CPU
// has AVX512_BF16 (its ISAs nest as bit sets).
inline bool typed_bf16_here() {
    const auto isa = (unsigned)dnnl::get_effective_cpu_isa();
    const auto has = [isa](dnnl::cpu_isa want) { return (isa & (unsigned)want) == (unsigned)want; };
    return has(dnnl::cpu_isa::avx512_core_bf16) && !has(dnnl::cpu_isa::avx512_core_amx);
}

// Whatever layout oneDNN prefers.
inline dnnl::memory::desc any(const dnnl::memory::dims &d) {
    return dnnl::memory::desc(d, dnnl::memory::data_type::f32, dnnl::memory::format_tag::any);
}

// A Slice's window: out[k...] = in[offsets + k * steps...], steps >= 1, inside the source.
inline void check_window(const dnnl::memory::dims &in, const dnnl::memory::dims &out,
                         const dnnl::memory::dims &offsets, const dnnl::memory::dims &steps) {
    if (out.size() != in.size() || offsets.size() != in.size() || steps.size() != in.size())
        throw std::runtime_error("slice: offsets, steps and ranks differ");
    for (size_t i = 0; i < in.size(); ++i)  // the last position, offset + (out - 1) * step < in
        if (steps[i] < 1 || offsets[i] < 0 || offsets[i] >= in[i] || out[i] < 1 ||
            (out[i] > 1 && steps[i] > (in[i] - 1 - offsets[i]) / (out[i] - 1)))
            throw std::runtime_error("slice: the window is outside the source");
}

// Two descriptions of the same dims over two buffers: one reorder from src to dst copies what
// the pair describes (a window with steps, a channel shuffle).
struct ViewPair {
    dnnl::memory::desc src, dst;
};

// Throws unless md is dense with no inner blocks (what a view of it may stride over).
inline void check_dense(const dnnl::memory::desc &md, const char *what) {
    if (md.get_format_kind() != dnnl::memory::format_kind::blocked || md.get_inner_nblks() != 0)
        throw std::runtime_error(std::string(what) + ": needs a layout without inner blocks");
}

// A window with steps. oneDNN's views cannot step, so each axis with a step s > 1 is split in
// two, (position / s, position % s), with strides (stride * s, stride): the window is the
// sub-memory (out, 1) at (offset / s, offset % s) of that view of `src` (dense, no inner
// blocks), and `dst` (dense, dims out) is split the same way. The view spans offset / s + out
// steps, which oneDNN accepts only within the axis (annotate.slice_window refuses a window whose
// last step overhangs it). Both keep the source's element type.
inline ViewPair stepped_window(const dnnl::memory::desc &src, const dnnl::memory::desc &dst,
                               const dnnl::memory::dims &offsets, const dnnl::memory::dims &steps) {
    check_dense(src, "slice"), check_dense(dst, "slice");
    const dnnl::memory::dims in = src.get_dims(), out = dst.get_dims();
    const dnnl::memory::dims ss = src.get_strides(), ds = dst.get_strides();
    dnnl::memory::dims pd, ps, wd, wo, od, os;
    for (size_t i = 0; i < in.size(); ++i) {
        const int64_t s = steps[i];
        if (s == 1) {
            pd.push_back(in[i]), ps.push_back(ss[i]), wd.push_back(out[i]);
            wo.push_back(offsets[i]), od.push_back(out[i]), os.push_back(ds[i]);
            continue;
        }
        pd.insert(pd.end(), {offsets[i] / s + out[i], s}), ps.insert(ps.end(), {ss[i] * s, ss[i]});
        wd.insert(wd.end(), {out[i], 1}), wo.insert(wo.end(), {offsets[i] / s, offsets[i] % s});
        od.insert(od.end(), {out[i], 1}), os.insert(os.end(), {ds[i], ds[i]});
    }
    const auto t = src.get_data_type();
    return {dnnl::memory::desc(pd, t, ps).submemory_desc(wd, wo), dnnl::memory::desc(od, t, os)};
}

// A channel shuffle in `groups` groups (ONNX's Reshape to (N, g, C/g, ...), Transpose of dims 1
// and 2, Reshape back): out channel j * g + i is in channel i * C/g + j. Dim 1 of both
// descriptions (dense, no inner blocks, the same dims) is split into (C/g, g): the source with
// strides (stride, stride * C/g), the destination with (stride * g, stride).
inline ViewPair shuffled(const dnnl::memory::desc &src, const dnnl::memory::desc &dst,
                         int64_t groups) {
    check_dense(src, "shuffle"), check_dense(dst, "shuffle");
    const dnnl::memory::dims d = src.get_dims(), ss = src.get_strides(), ds = dst.get_strides();
    if (d.size() < 2 || dst.get_dims() != d)
        throw std::runtime_error("shuffle: needs the same dims in and out, with channels");
    if (groups < 1 || d[1] % groups != 0)
        throw std::runtime_error("shuffle: the groups do not divide the channels");
    const int64_t per = d[1] / groups;
    dnnl::memory::dims split = d, sv = ss, dv = ds;
    split[1] = per, split.insert(split.begin() + 2, groups);
    sv.insert(sv.begin() + 2, ss[1] * per);
    dv[1] = ds[1] * groups, dv.insert(dv.begin() + 2, ds[1]);
    const auto f32 = dnnl::memory::data_type::f32;
    return {dnnl::memory::desc(split, f32, sv), dnnl::memory::desc(split, f32, dv)};
}

// Appends eltwise `alg` to `po`. oneDNN 3.2's AVX2 tanh gathers its coefficients from a table,
// slow where gathers are (AMD EPYC Zen 3: 1.7 ms for a million floats, against 0.3 ms for its
// logistic; a conv with a tanh post-op 3.0 ms, with this one 1.7 ms). So tanh(x) is appended
// as 2 * logistic(2x) - 1 (three post-ops, one pass; 1.8e-7 from tanh at most).
// How many oneDNN post-ops append_eltwise appends for `alg`: a binary post-op's operand is
// bound at its index in oneDNN's list, which counts these.
inline int eltwise_width(dnnl::algorithm alg) {
    return alg == dnnl::algorithm::eltwise_tanh ? 3 : 1;
}

inline void append_eltwise(dnnl::post_ops &po, dnnl::algorithm alg, float alpha, float beta) {
    if (alg != dnnl::algorithm::eltwise_tanh) return po.append_eltwise(alg, alpha, beta);
    po.append_eltwise(dnnl::algorithm::eltwise_linear, 2.f, 0.f);
    po.append_eltwise(dnnl::algorithm::eltwise_logistic, 0.f, 0.f);
    po.append_eltwise(dnnl::algorithm::eltwise_linear, 2.f, -1.f);
}

// A standalone tanh as one primitive: x + x, then append_eltwise's logistic form as post-ops
// (0.38 ms for a million floats where oneDNN's tanh takes 1.7 ms, on any layout).
inline dnnl::binary::primitive_desc tanh_as_binary(const dnnl::engine &eng,
                                                   const dnnl::memory::desc &md,
                                                   dnnl::primitive_attr attr) {
    dnnl::post_ops po;
    po.append_eltwise(dnnl::algorithm::eltwise_logistic, 0.f, 0.f);
    po.append_eltwise(dnnl::algorithm::eltwise_linear, 2.f, -1.f);
    attr.set_post_ops(po);
    return dnnl::binary::primitive_desc(eng, dnnl::algorithm::binary_add, md, md, md, attr);
}

// oneDNN's reference implementations are plain C loops, often 10-100x slower than onnxruntime.
inline bool is_reference(const dnnl::primitive_desc_base &pd) {
    return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

// A convolution run as im2col + gemm (far slower than oneDNN's direct kernels).
inline bool is_gemm(const dnnl::primitive_desc_base &pd) {
    return std::string(pd.impl_info_str()).find("gemm") != std::string::npos;
}

// An implementation far slower than onnxruntime's kernels (ops.py's SLOW prefixes).
inline bool is_slow(const dnnl::primitive_desc_base &pd) {
    const std::string impl = pd.impl_info_str();
    for (const char *prefix : byoc_ops::SLOW)
        if (impl.rfind(prefix, 0) == 0) return true;
    return false;
}

// make(md), or make(moved) when oneDNN's kernel for md is slow and for moved is not (pooling,
// LRN and resampling over a plain NCHW source run channels-last; a softmax over an outer axis
// runs with that axis innermost). The caller reorders its source to the returned primitive's
// src_desc().
template <class Make>
auto fast_layout(const dnnl::memory::desc &md, const dnnl::memory::desc &moved, Make make) {
    auto pd = make(md);
    if (is_slow(pd) && moved != md) {
        auto other = make(moved);
        if (!is_slow(other)) return other;
    }
    return pd;
}

// out[j...] = in[perm[j]...] as a strided view of a dense source of dims `in` and the given
// strides (dims and strides in perm's order); without strides, of a plain source.
inline dnnl::memory::desc permuted(const dnnl::memory::dims &in, const dnnl::memory::dims &perm,
                                   const dnnl::memory::dims &strides) {
    const size_t r = in.size();
    if (perm.size() != r || strides.size() != r)
        throw std::runtime_error("transpose: perm and rank differ");
    dnnl::memory::dims out(r), view(r);
    std::vector<bool> seen(r, false);
    for (size_t j = 0; j < r; ++j) {
        const int64_t p = perm[j];
        if (p < 0 || p >= (int64_t)r || seen[p])
            throw std::runtime_error("transpose: perm is not a permutation");
        seen[p] = true;
        out[j] = in[p], view[j] = strides[p];
    }
    return dnnl::memory::desc(out, dnnl::memory::data_type::f32, view);
}

inline dnnl::memory::desc permuted(const dnnl::memory::dims &in, const dnnl::memory::dims &perm) {
    return permuted(in, perm, plain(in).get_strides());
}

// The inverse of permutation p: a view of a transpose's output in its source's order of dims.
inline dnnl::memory::dims inverse(const dnnl::memory::dims &p) {
    dnnl::memory::dims inv(p.size(), -1);
    for (size_t j = 0; j < p.size(); ++j) {
        if (p[j] < 0 || p[j] >= (int64_t)p.size() || inv[p[j]] >= 0)
            throw std::runtime_error("transpose: perm is not a permutation");
        inv[p[j]] = (int64_t)j;
    }
    return inv;
}

// A Reduce (sum, mean, max) of a plain tensor `in` into a plain `out` of the same rank, each dim
// kept or reduced to 1, over one run of adjacent axes, as a pooling. `in` seen as (outer, R,
// inner) is an NWC tensor of `inner` channels over R steps, pooled over all R into the NWC
// (outer, inner, 1) that `out` is: `src` and `dst` describe the plain tensors' bytes so. oneDNN's
// reduction primitive has a jit kernel only over innermost axes: a sum over 128 tokens of 384
// channels took 0.41 ms in ref:any, pooled 4 us (AMD EPYC Zen 4). Its pooling is jitted for any
// run of axes.
struct Pooled {
    dnnl::memory::desc src, dst;
    int64_t steps;  // R
};

inline Pooled reduce_as_pool(const dnnl::memory::dims &in, const dnnl::memory::dims &out) {
    if (in.size() != out.size()) throw std::runtime_error("reduce: the output's rank differs");
    int lo = -1, hi = -1;
    for (int i = 0; i < (int)in.size(); ++i) {
        if (out[i] == in[i]) continue;
        if (out[i] != 1) throw std::runtime_error("reduce: an output dim is neither 1 nor kept");
        if (lo < 0) lo = i;
        hi = i;
    }
    if (lo < 0) throw std::runtime_error("reduce: no dim is reduced");
    int64_t outer = 1, steps = 1, inner = 1;
    for (int i = 0; i < (int)in.size(); ++i) {
        if (i < lo) outer *= in[i];
        if (i > hi) inner *= in[i];
        if (i < lo || i > hi) continue;
        if (out[i] != 1) throw std::runtime_error("reduce: the reduced axes must be adjacent");
        steps *= in[i];
    }
    const auto f32 = dnnl::memory::data_type::f32;
    return {dnnl::memory::desc({outer, inner, steps}, f32, {steps * inner, 1, inner}),
            dnnl::memory::desc({outer, inner, 1}, f32, {inner, 1, inner}), steps};
}

// The pooling of reduce_as_pool's views; `sum` scales the average by the count of steps.
inline dnnl::pooling_forward::primitive_desc reduce_pd(const dnnl::engine &eng,
                                                       dnnl::algorithm alg, bool sum,
                                                       const Pooled &p, dnnl::primitive_attr attr) {
    if (sum) {
        dnnl::post_ops po;
        po.append_eltwise(dnnl::algorithm::eltwise_linear, (float)p.steps, 0.f);
        attr.set_post_ops(po);
    }
    return dnnl::pooling_forward::primitive_desc(
        eng, dnnl::prop_kind::forward_inference, alg, p.src, p.dst, {p.steps}, {p.steps}, {0},
        {0}, {0}, attr);
}

// The algorithm with this id (its row + 1: what Python sends the shim).
template <size_t N>
dnnl::algorithm by_id(const byoc_ops::Alg (&table)[N], int64_t id, const char *what) {
    if (id < 1 || id > (int64_t)N)
        throw std::runtime_error(std::string("unknown ") + what + " algorithm " +
                                 std::to_string(id));
    return table[id - 1].alg;
}

// The algorithm with this name (what a generated C++ partition passes the kernel library).
template <size_t N>
dnnl::algorithm by_name(const byoc_ops::Alg (&table)[N], const std::string &name,
                        const char *what) {
    for (const byoc_ops::Alg &a : table)
        if (name == a.name) return a.alg;
    throw std::runtime_error(std::string("unknown ") + what + " algorithm '" + name + "'");
}

// NaN -> 0 over `count` floats in place (safe_softmax: PyTorch's Where(IsNaN(s), 0, s)). On the
// bits, as run_erf's clamp (a float comparison may trap, so a compiler keeps it a branch), so
// OpenMP's simd directive vectorizes the loop.
inline void nan_to_zero(float *x, int64_t count) {
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < count; ++i) {
        uint32_t b;
        std::memcpy(&b, &x[i], sizeof b);
        b = (b & 0x7fffffffu) > 0x7f800000u ? 0u : b;
        std::memcpy(&x[i], &b, sizeof b);
    }
}

}  // namespace byoc_dnnl
