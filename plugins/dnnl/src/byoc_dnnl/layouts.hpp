// layouts.hpp: what both of byoc-dnnl's native libraries use (shim.cpp, the JSON runtime;
// kernels.cpp, the C source mode's kernel library): memory descriptors, the test for oneDNN's
// slow kernels, and lookups in the algorithm tables. It reads namespace byoc_ops, generated from
// ops.py, which native.source() puts in front of both files.

#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>

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

// Whatever layout oneDNN prefers.
inline dnnl::memory::desc any(const dnnl::memory::dims &d) {
    return dnnl::memory::desc(d, dnnl::memory::data_type::f32, dnnl::memory::format_tag::any);
}

// oneDNN's reference implementations are plain C loops, often 10-100x slower than onnxruntime.
inline bool is_reference(const dnnl::primitive_desc_base &pd) {
    return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

// An implementation far slower than onnxruntime's kernels (ops.py's SLOW prefixes).
inline bool is_slow(const dnnl::primitive_desc_base &pd) {
    const std::string impl = pd.impl_info_str();
    for (const char *prefix : byoc_ops::SLOW)
        if (impl.rfind(prefix, 0) == 0) return true;
    return false;
}

// make(md), or make(channels-last) when oneDNN's kernel for md is slow and for channels-last
// is not (pooling and LRN over a plain NCHW source). The caller reorders its source to the
// returned primitive's src_desc().
template <class Make>
auto fast_layout(const dnnl::memory::desc &md, Make make) {
    auto pd = make(md);
    if (is_slow(pd)) {
        auto moved = make(channels_last(md.get_dims()));
        if (!is_slow(moved)) return moved;
    }
    return pd;
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

}  // namespace byoc_dnnl
