// layouts.hpp: memory descriptors both of byoc-dnnl's native libraries use (shim.cpp, the JSON
// runtime; kernels.cpp, the C source mode's kernel library).

#pragma once

#include <oneapi/dnnl/dnnl.hpp>

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

// Whatever layout oneDNN prefers.
inline dnnl::memory::desc any(const dnnl::memory::dims &d) {
    return dnnl::memory::desc(d, dnnl::memory::data_type::f32, dnnl::memory::format_tag::any);
}

// oneDNN's reference implementations are plain C loops, often 10-100x slower than onnxruntime.
inline bool is_reference(const dnnl::primitive_desc_base &pd) {
    return std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
}

}  // namespace byoc_dnnl
