// kernels.cpp: byoc-dnnl's op-level oneDNN kernel library (see dnnl_kernels.h).
//
// A kernel is one primitive described by its operands: each one either a constant (reordered
// once, when the kernel is made, into the layout the primitive wants) or a run-time pointer to a
// dense tensor (reordered into the workspace when the primitive wants another layout). The
// output is written dense, through the workspace when the primitive picked a blocked layout.

#include "dnnl_kernels.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_debug.h>
#include "layouts.hpp"
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace dnnl_kernels {

using namespace dnnl;
using dt = memory::data_type;

namespace {

using byoc_dnnl::any;
using byoc_dnnl::append_eltwise;
using byoc_dnnl::eltwise_width;
using byoc_dnnl::by_name;
using byoc_dnnl::channels_last;
using byoc_dnnl::check_window;
using byoc_dnnl::fast_layout;
using byoc_dnnl::innermost;
using byoc_dnnl::inverse;
using byoc_dnnl::permuted;
using byoc_dnnl::plain;
using byoc_dnnl::Pooled;
using byoc_dnnl::reduce_as_pool;
using byoc_dnnl::reduce_pd;
using byoc_dnnl::shuffled;
using byoc_dnnl::stepped_window;
using byoc_dnnl::tanh_as_binary;
using byoc_dnnl::ViewPair;
using byoc_ops::BINARY_ALGS;  // the algorithm tables (ops.py, generated)
using byoc_ops::ELTWISE_ALGS;
using byoc_ops::POOL_ALGS;
using byoc_ops::REDUCE_ALGS;
using byoc_ops::RESAMPLE_ALGS;

[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error(msg); }

size_t aligned(size_t n) { return (n + 63) / 64 * 64; }

std::shared_ptr<char> allocate(size_t bytes) {
    char *p = (char *)std::aligned_alloc(64, aligned(std::max<size_t>(bytes, 64)));
    if (!p) fail("out of memory");
    return std::shared_ptr<char>(p, std::free);
}

algorithm eltwise_alg(const std::string &a) { return by_name(ELTWISE_ALGS, a, "eltwise"); }
algorithm binary_alg(const std::string &a) { return by_name(BINARY_ALGS, a, "binary"); }

}  // namespace

struct Frame {
    stream strm;
    std::shared_ptr<char> buffers, work;
};

struct Context {
    engine eng{engine::kind::cpu, 0};
    bool bf16 = false;
    bool typed_bf16 = false;  // dense layers in bf16 by their operands' types (shim.cpp's Net)
    int threads = 0;
    size_t work = 0;  // the largest workspace of its kernels
    std::vector<std::unique_ptr<Kernel>> kernels;
    std::mutex lock;
    std::vector<std::unique_ptr<Frame>> pool;
};

struct Operand {
    int arg;                     // DNNL_ARG_*
    memory::desc given, want;    // as the caller holds it, as the primitive reads it
    int slot = -1;               // index in run's `ins`; -1: a constant
    std::shared_ptr<char> data;  // a constant, in `want`
    reorder to_want;             // run-time operands whose `given` is not `want`
    size_t off = 0;              // where `to_want` writes, in the workspace
};

struct Kernel {
    Context *ctx = nullptr;
    primitive prim;
    bool is_erf = false;
    bool nan_to_zero = false;  // safe_softmax: NaN -> 0 in the output, after the primitive
    std::string impl;
    int threads = 0;  // the OpenMP threads its primitive was made for
    std::vector<Operand> ins;
    int dst_arg = DNNL_ARG_DST;
    memory::desc dst_given, dst_want;
    reorder from_dst;           // when dst_want is not dst_given
    size_t dst_off = 0;
    int sum_slot = -1;          // a sum post-op's operand, copied into dst before the primitive
    reorder to_sum;
    size_t scratch = 0, scratch_off = 0;
    size_t work = 0;
};

namespace {

// Builds a Kernel operand by operand, laying out its workspace.
struct Builder {
    Context &c;
    std::unique_ptr<Kernel> k;
    int slots = 0;

    explicit Builder(Context &ctx) : c(ctx), k(new Kernel()) {
        k->ctx = &ctx;
        k->threads = omp_get_max_threads();  // as when its primitive was just described
    }

    size_t reserve(const memory::desc &md) {
        size_t off = k->work;
        k->work += aligned(md.get_size());
        return off;
    }

    // Claims the next run-time slot for a run-time operand (call in operand order).
    int slot(const In &in) { return in.data ? -1 : slots++; }

    void operand(int arg, const In &in, int slot, const memory::desc &given,
                 const memory::desc &want) {
        Operand o;
        o.arg = arg;
        o.given = given;
        o.want = want;
        o.slot = slot;
        if (in.data) {  // a constant: reorder once, now
            o.data = allocate(want.get_size());
            std::memset(o.data.get(), 0, want.get_size());
            memory from(given, c.eng, const_cast<float *>(in.data));
            memory to(want, c.eng, o.data.get());
            stream s(c.eng);
            reorder(from, to).execute(s, from, to);
            s.wait();
        } else if (given != want) {
            o.to_want = reorder(reorder::primitive_desc(c.eng, given, c.eng, want));
            o.off = reserve(want);
        }
        k->ins.push_back(o);
    }

    void output(const Dims &dims, const memory::desc &want) {
        k->dst_given = plain(dims);
        k->dst_want = want;
        if (want.get_dims() != dims) fail("the output shape differs from what oneDNN computes");
        if (want != k->dst_given) {
            k->from_dst = reorder(reorder::primitive_desc(c.eng, want, c.eng, k->dst_given));
            k->dst_off = reserve(want);
        }
    }

    Kernel *finish(const primitive &p, const primitive_desc_base &pd) {
        k->prim = p;
        k->scratch = pd.scratchpad_desc().get_size();
        k->scratch_off = k->work;
        k->work += aligned(k->scratch);
        const char *impl = pd.impl_info_str();
        auto kind = (dnnl_primitive_kind_t)p.get_kind();
        k->impl = std::string(dnnl_prim_kind2str(kind)) + " " + (impl ? impl : "");
        return publish();
    }

    Kernel *publish() {
        c.work = std::max(c.work, k->work);
        c.kernels.push_back(std::move(k));
        return c.kernels.back().get();
    }
};

primitive_attr attr_of(Context &c, bool fpmath) {
    primitive_attr attr;
    attr.set_scratchpad_mode(scratchpad_mode::user);
    if (fpmath && c.bf16) attr.set_fpmath_mode(fpmath_mode::bf16);
    return attr;
}

// The post-ops as an attr; a full-size binary operand is described in `dst_md` when given.
primitive_attr post_attr(Context &c, const Posts &posts, bool fpmath, const Dims &dst,
                         const memory::desc *dst_md) {
    primitive_attr attr = attr_of(c, fpmath);
    post_ops po;
    for (const Post &p : posts) {
        std::string kind = p.kind;
        if (kind == "eltwise") {
            append_eltwise(po, eltwise_alg(p.alg), p.alpha, p.beta);
        } else if (kind == "sum") {
            if (p.operand.dims != dst) fail("a sum post-op's operand must have the output's shape");
            po.append_sum(1.f);
        } else if (kind == "binary") {
            bool full = p.operand.dims == dst && dst_md;
            po.append_binary(binary_alg(p.alg), full ? *dst_md : plain(p.operand.dims));
        } else {
            fail("unknown post-op '" + kind + "'");
        }
    }
    attr.set_post_ops(po);
    return attr;
}

// Binds the post-ops' operands (after the kernel's own, in post-op order).
void post_operands(Builder &b, const Posts &posts, const memory::desc &dst_md) {
    for (size_t i = 0, slot = 0; i < posts.size(); ++i) {
        const Post &p = posts[i];
        std::string kind = p.kind;
        const int at = (int)slot;  // its index in oneDNN's list (a tanh takes three)
        slot += kind == "eltwise" ? eltwise_width(eltwise_alg(p.alg)) : 1;
        if (kind == "sum") {
            if (p.operand.data) fail("a sum post-op's operand must be a run-time tensor");
            b.k->sum_slot = b.slot(p.operand);
            b.k->to_sum = reorder(reorder::primitive_desc(b.c.eng, plain(p.operand.dims), b.c.eng,
                                                          dst_md));
        } else if (kind == "binary") {
            const Dims &d = p.operand.dims;
            memory::desc want = d == dst_md.get_dims() ? dst_md : plain(d);
            b.operand(DNNL_ARG_ATTR_MULTIPLE_POST_OP(at) | DNNL_ARG_SRC_1, p.operand,
                      b.slot(p.operand), plain(d), want);
        }
    }
}

bool has_full_operand(const Posts &posts, const Dims &dst) {
    for (const Post &p : posts)
        if (std::string(p.kind) != "eltwise" && p.operand.dims == dst) return true;
    return false;
}


}  // namespace

Context *context(bool bf16, int threads) {
    auto c = std::make_unique<Context>();
    c->bf16 = bf16;
    c->typed_bf16 = bf16 && byoc_dnnl::typed_bf16_here();
    c->threads = threads;
    // oneDNN sizes a primitive's work split for the OpenMP threads of the thread that describes
    // it and keeps it at run time; the count is per thread and outlives the call that set it.
    // The context's kernels are made next, on this thread, so they are made for its count.
    if (threads > 0) omp_set_num_threads(threads);
    return c.release();
}

void destroy(Context *ctx) { delete ctx; }

Kernel *conv(Context &c, bool deconv, const In &src, const In &weights, const In &bias,
             const Dims &dst, const Dims &strides, const Dims &dilations, const Dims &pads_begin,
             const Dims &pads_end, const Posts &posts) {
    if (!weights.data) fail("conv: the weights must be constant");
    if (src.dims.size() < 3 || src.dims.size() > 5) fail("conv: src must have 3 to 5 dims");
    const bool biased = !bias.dims.empty();
    auto make = [&](const memory::desc &d, const primitive_attr &a) -> primitive_desc {
        auto kind = prop_kind::forward_inference;
        memory::desc s = any(src.dims), w = any(weights.dims), bmd = plain(bias.dims);
        if (deconv)
            return biased ? deconvolution_forward::primitive_desc(
                                c.eng, kind, algorithm::deconvolution_direct, s, w, bmd, d,
                                strides, dilations, pads_begin, pads_end, a)
                          : deconvolution_forward::primitive_desc(
                                c.eng, kind, algorithm::deconvolution_direct, s, w, d, strides,
                                dilations, pads_begin, pads_end, a);
        return biased ? convolution_forward::primitive_desc(
                            c.eng, kind, algorithm::convolution_direct, s, w, bmd, d, strides,
                            dilations, pads_begin, pads_end, a)
                      : convolution_forward::primitive_desc(
                            c.eng, kind, algorithm::convolution_direct, s, w, d, strides,
                            dilations, pads_begin, pads_end, a);
    };
    primitive_desc pd = make(any(dst), post_attr(c, posts, true, dst, nullptr));
    if (has_full_operand(posts, dst)) {  // describe full-size operands in the dst layout
        memory::desc d = pd.dst_desc();
        pd = make(d, post_attr(c, posts, true, dst, &d));
    }
    Builder b(c);
    b.operand(DNNL_ARG_SRC, src, b.slot(src), plain(src.dims), pd.src_desc());
    b.operand(DNNL_ARG_WEIGHTS, weights, -1, plain(weights.dims), pd.weights_desc());
    if (biased) b.operand(DNNL_ARG_BIAS, bias, b.slot(bias), plain(bias.dims), plain(bias.dims));
    post_operands(b, posts, pd.dst_desc());
    b.output(dst, pd.dst_desc());
    return b.finish(primitive(pd), pd);
}

Kernel *matmul(Context &c, const In &a, const In &w, const In &bias, const Dims &dst,
               const Posts &posts, const Dims &perm_a, const Dims &perm_b, const Dims &perm_dst) {
    if (w.data && !perm_b.empty()) fail("matmul: a transposed constant is folded, not viewed");
    const memory::desc amd = perm_a.empty() ? plain(a.dims) : permuted(a.dims, perm_a);
    const memory::desc bmd = perm_b.empty() ? plain(w.dims) : permuted(w.dims, perm_b);
    const memory::desc dmd = perm_dst.empty() ? plain(dst) : permuted(dst, inverse(perm_dst));
    const Dims od = dmd.get_dims();
    if (od.size() < 2 || amd.get_ndims() != (int)od.size() || bmd.get_ndims() != (int)od.size())
        fail("matmul: operands must have the output's rank (>= 2)");
    primitive_attr attr = post_attr(c, posts, true, od, &dmd);
    // A dense layer in bf16 by types (typed_bf16): its source rounded once a run, its weights
    // once; float32 out. A product of two activations (attention's) stays float32.
    const bool typed = c.typed_bf16 && w.data && perm_a.empty();
    const memory::desc smd = typed ? memory::desc(a.dims, dt::bf16, amd.get_strides()) : amd;
    const memory::desc wmd =
        w.data ? memory::desc(w.dims, typed ? dt::bf16 : dt::f32, memory::format_tag::any) : bmd;
    const bool biased = !bias.dims.empty();
    auto pd = biased ? dnnl::matmul::primitive_desc(c.eng, smd, wmd, plain(bias.dims), dmd, attr)
                     : dnnl::matmul::primitive_desc(c.eng, smd, wmd, dmd, attr);
    Builder b(c);
    b.operand(DNNL_ARG_SRC, a, b.slot(a), amd, smd);
    b.operand(DNNL_ARG_WEIGHTS, w, b.slot(w), bmd, pd.weights_desc());
    if (biased) b.operand(DNNL_ARG_BIAS, bias, b.slot(bias), plain(bias.dims), plain(bias.dims));
    post_operands(b, posts, dmd);
    b.output(dst, plain(dst));
    b.k->dst_given = b.k->dst_want = dmd;  // through a transpose's strided view, if any
    return b.finish(dnnl::matmul(pd), pd);
}

Kernel *binary(Context &c, const char *alg, const In &a, const In &x, const Posts &posts) {
    if (x.dims.size() != a.dims.size()) fail("binary: the operands must have the same rank");
    memory::desc md = plain(a.dims);
    primitive_attr attr = post_attr(c, posts, false, a.dims, &md);
    auto pd = dnnl::binary::primitive_desc(c.eng, binary_alg(alg), md, plain(x.dims), md, attr);
    Builder b(c);
    b.operand(DNNL_ARG_SRC_0, a, b.slot(a), md, md);
    b.operand(DNNL_ARG_SRC_1, x, b.slot(x), plain(x.dims), plain(x.dims));
    post_operands(b, posts, md);
    b.output(a.dims, md);
    return b.finish(dnnl::binary(pd), pd);
}

Kernel *eltwise(Context &c, const char *alg, float alpha, float beta, const In &src) {
    memory::desc md = plain(src.dims);
    if (eltwise_alg(alg) == algorithm::eltwise_tanh) {
        auto pd = tanh_as_binary(c.eng, md, attr_of(c, false));
        Builder b(c);
        int slot = b.slot(src);
        b.operand(DNNL_ARG_SRC_0, src, slot, md, md);
        b.operand(DNNL_ARG_SRC_1, src, slot, md, md);
        b.output(src.dims, md);
        return b.finish(dnnl::binary(pd), pd);
    }
    auto pd = eltwise_forward::primitive_desc(c.eng, prop_kind::forward_inference,
                                              eltwise_alg(alg), md, md, alpha, beta,
                                              attr_of(c, false));
    Builder b(c);
    b.operand(DNNL_ARG_SRC, src, b.slot(src), md, md);
    b.output(src.dims, md);
    return b.finish(eltwise_forward(pd), pd);
}

namespace {

// A kernel of one source and one destination (pooling, LRN, resampling): its source reordered
// from plain to the layout it was made for, its output reordered back to plain if it chose
// another.
template <class Prim>
Kernel *src_dst(Context &c, const In &src, const Dims &dst,
                const typename Prim::primitive_desc &pd) {
    Builder b(c);
    b.operand(DNNL_ARG_SRC, src, b.slot(src), plain(src.dims), pd.src_desc());
    b.output(dst, pd.dst_desc());
    return b.finish(Prim(pd), pd);
}

}  // namespace

Kernel *pool(Context &c, const char *alg, const In &src, const Dims &dst, const Dims &kernel,
             const Dims &strides, const Dims &dilations, const Dims &pads_begin,
             const Dims &pads_end) {
    algorithm pa = by_name(POOL_ALGS, alg, "pooling");
    auto pd = fast_layout(plain(src.dims), channels_last(src.dims),
                          [&](const memory::desc &s) {
        return pooling_forward::primitive_desc(c.eng, prop_kind::forward_inference, pa, s,
                                               any(dst), strides, kernel, dilations, pads_begin,
                                               pads_end, attr_of(c, false));
    });
    return src_dst<pooling_forward>(c, src, dst, pd);
}

Kernel *reduce(Context &c, const char *alg, const In &src, const Dims &dst) {
    const Pooled p = reduce_as_pool(src.dims, dst);
    const std::string name = alg;
    auto pd = reduce_pd(c.eng, by_name(REDUCE_ALGS, name, "reduce"), name == "sum", p,
                        attr_of(c, false));
    Builder b(c);
    b.operand(DNNL_ARG_SRC, src, b.slot(src), p.src, p.src);  // views of the plain tensors
    b.output(dst, plain(dst));
    b.k->dst_given = b.k->dst_want = p.dst;
    return b.finish(pooling_forward(pd), pd);
}

Kernel *lrn(Context &c, int size, float alpha, float beta, float k, const In &src) {
    if (size < 1 || size % 2 == 0) fail("lrn: the size must be odd");
    auto pd = fast_layout(plain(src.dims), channels_last(src.dims),
                          [&](const memory::desc &md) {
        return lrn_forward::primitive_desc(c.eng, prop_kind::forward_inference,
                                           algorithm::lrn_across_channels, md, md, size, alpha,
                                           beta, k, attr_of(c, false));
    });
    return src_dst<lrn_forward>(c, src, src.dims, pd);
}

Kernel *resample(Context &c, const char *alg, const In &src, const Dims &dst) {
    algorithm ra = by_name(RESAMPLE_ALGS, alg, "resampling");
    if (dst.size() != src.dims.size() || dst.size() < 3 || dst.size() > 5)
        fail("resample: src and dst need the same rank, 3 to 5");
    auto pd = fast_layout(plain(src.dims), channels_last(src.dims),
                          [&](const memory::desc &s) {
        return resampling_forward::primitive_desc(c.eng, prop_kind::forward_inference, ra, s,
                                                  any(dst), attr_of(c, false));
    });
    return src_dst<resampling_forward>(c, src, dst, pd);
}

Kernel *softmax(Context &c, int axis, const In &src) {
    const Dims &d = src.dims;
    if (axis < 0 || axis >= (int)d.size()) fail("softmax: bad axis");
    auto make = [&](const memory::desc &md) {
        return softmax_forward::primitive_desc(c.eng, prop_kind::forward_inference,
                                               algorithm::softmax_accurate, md, md, axis,
                                               attr_of(c, false));
    };
    // oneDNN's fast softmax wants the axis innermost: transpose it there (a reorder).
    auto pd = fast_layout(plain(d), innermost(d, axis), make);
    return src_dst<softmax_forward>(c, src, d, pd);
}

Kernel *safe_softmax(Context &c, int axis, const In &src) {
    Kernel *k = softmax(c, axis, src);
    k->nan_to_zero = true;
    return k;
}

Kernel *layernorm(Context &c, float epsilon, const In &src, const In &scale, const In &shift) {
    const Dims &d = src.dims;
    const bool scaled = !scale.dims.empty(), shifted = !shift.dims.empty();
    if (d.size() < 2 || (scaled && scale.dims != Dims{d.back()})) fail("layernorm: bad shapes");
    if (shifted && shift.dims != Dims{d.back()}) fail("layernorm: bad bias shape");
    auto flags = normalization_flags::none;
    if (scaled) flags = flags | normalization_flags::use_scale;
    if (shifted) flags = flags | normalization_flags::use_shift;
    memory::desc md = plain(d);
    auto pd = layer_normalization_forward::primitive_desc(
        c.eng, prop_kind::forward_inference, md, md, epsilon, flags, attr_of(c, false));
    Builder b(c);
    b.operand(DNNL_ARG_SRC, src, b.slot(src), md, md);
    if (scaled) b.operand(DNNL_ARG_SCALE, scale, b.slot(scale), plain(scale.dims), plain(scale.dims));
    if (shifted) b.operand(DNNL_ARG_SHIFT, shift, b.slot(shift), plain(shift.dims), plain(shift.dims));
    b.output(d, md);
    return b.finish(layer_normalization_forward(pd), pd);
}

Kernel *batchnorm(Context &c, float epsilon, const In &src, const In &mean, const In &variance,
                  const In &scale, const In &shift) {
    const Dims &d = src.dims;
    if (d.size() < 2) fail("batchnorm: bad shape");
    for (const In *p : {&mean, &variance, &scale, &shift})
        if (p->dims != Dims{d[1]}) fail("batchnorm: parameters must be [C]");
    auto flags = normalization_flags::use_global_stats | normalization_flags::use_scale |
                 normalization_flags::use_shift;
    memory::desc md = plain(d);
    auto pd = batch_normalization_forward::primitive_desc(c.eng, prop_kind::forward_inference,
                                                          md, md, epsilon, flags, attr_of(c, false));
    Builder b(c);
    b.operand(DNNL_ARG_SRC, src, b.slot(src), md, md);
    const std::pair<int, const In *> params[] = {{DNNL_ARG_MEAN, &mean},
                                                 {DNNL_ARG_VARIANCE, &variance},
                                                 {DNNL_ARG_SCALE, &scale},
                                                 {DNNL_ARG_SHIFT, &shift}};
    for (auto [arg, p] : params) b.operand(arg, *p, b.slot(*p), plain(p->dims), plain(p->dims));
    b.output(d, md);
    return b.finish(batch_normalization_forward(pd), pd);
}

Kernel *concat(Context &c, int axis, const std::vector<In> &srcs, const Dims &dst) {
    if (srcs.empty() || axis < 0 || axis >= (int)dst.size()) fail("concat: bad axis or operands");
    std::vector<memory::desc> mds;
    for (const In &s : srcs) mds.push_back(plain(s.dims));
    auto pd = dnnl::concat::primitive_desc(c.eng, plain(dst), axis, mds, attr_of(c, false));
    Builder b(c);
    for (size_t i = 0; i < srcs.size(); ++i)
        b.operand(DNNL_ARG_MULTIPLE_SRC + (int)i, srcs[i], b.slot(srcs[i]), mds[i], mds[i]);
    b.output(dst, plain(dst));
    return b.finish(dnnl::concat(pd), pd);
}

Kernel *erf(Context &c, const In &src) {
    Builder b(c);
    b.operand(DNNL_ARG_SRC, src, b.slot(src), plain(src.dims), plain(src.dims));
    b.output(src.dims, plain(src.dims));
    b.k->is_erf = true;
    b.k->impl = "erf omp";
    return b.publish();
}

namespace {

// src read through `view` (a strided or offset description of its storage) and reordered into a
// dense output of dims `out`, written through `through` (another description of its bytes) if
// given: one jit reorder.
Kernel *copy_view(Context &c, const In &src, const memory::desc &view, const Dims &out,
                  const memory::desc *through = nullptr) {
    const memory::desc to = through ? *through : plain(out);
    auto pd = reorder::primitive_desc(c.eng, view, c.eng, to);
    Builder b(c);
    b.operand(DNNL_ARG_FROM, src, b.slot(src), view, view);
    b.k->dst_arg = DNNL_ARG_TO;
    b.output(out, plain(out));
    b.k->dst_given = b.k->dst_want = to;
    return b.finish(reorder(pd), pd);
}

}  // namespace

Kernel *slice(Context &c, const Dims &offsets, const Dims &steps, const In &src,
              const Dims &dst) {
    check_window(src.dims, dst, offsets, steps);
    const ViewPair w = stepped_window(plain(src.dims), plain(dst), offsets, steps);
    return copy_view(c, src, w.src, dst, &w.dst);
}

Kernel *transpose(Context &c, const Dims &perm, const In &src) {
    const memory::desc view = permuted(src.dims, perm);
    return copy_view(c, src, view, view.get_dims());
}

Kernel *shuffle(Context &c, int64_t groups, const In &src) {
    const ViewPair w = shuffled(plain(src.dims), plain(src.dims), groups);
    return copy_view(c, src, w.src, src.dims, &w.dst);
}

const char *implementation(const Kernel &k) { return k.impl.c_str(); }

int threads(const Kernel &k) { return k.threads; }

Frame *acquire(Context &c, size_t buffer_bytes) {
    if (c.threads > 0) omp_set_num_threads(c.threads);  // this thread's runs, once per run
    {
        std::lock_guard<std::mutex> g(c.lock);
        if (!c.pool.empty()) {
            Frame *f = c.pool.back().release();
            c.pool.pop_back();
            return f;
        }
    }
    auto f = std::make_unique<Frame>();
    f->strm = stream(c.eng);
    f->buffers = allocate(buffer_bytes);
    f->work = allocate(c.work);
    return f.release();
}

void release(Context &c, Frame *f) {
    std::lock_guard<std::mutex> g(c.lock);
    c.pool.emplace_back(f);
}

float *buffer(Frame &f, size_t offset) { return (float *)(f.buffers.get() + offset); }

void run(Kernel &k, Frame &f, std::initializer_list<const float *> ins, float *dst) {
    const engine &eng = k.ctx->eng;
    auto in = [&](int slot) {
        if (slot < 0 || slot >= (int)ins.size()) fail("run: too few operands");
        return (void *)ins.begin()[slot];
    };
    char *work = f.work.get();
    if (k.is_erf) {
        const float *x = (const float *)in(0);
        int64_t n = (int64_t)(k.dst_given.get_size() / sizeof(float));
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; ++i) dst[i] = std::erf(x[i]);
        return;
    }
    std::unordered_map<int, memory> args;
    for (const Operand &o : k.ins) {
        if (o.data) {
            args[o.arg] = memory(o.want, eng, o.data.get());
            continue;
        }
        memory given(o.given, eng, in(o.slot));
        if (o.given == o.want) {
            args[o.arg] = given;
        } else {
            memory want(o.want, eng, work + o.off);
            o.to_want.execute(f.strm, given, want);
            args[o.arg] = want;
        }
    }
    const bool direct = k.dst_want == k.dst_given;
    memory out(k.dst_given, eng, dst);
    memory d = direct ? out : memory(k.dst_want, eng, work + k.dst_off);
    if (k.sum_slot >= 0 && !(direct && in(k.sum_slot) == (void *)dst)) {
        memory s(k.dst_given, eng, in(k.sum_slot));
        k.to_sum.execute(f.strm, s, d);
    }
    args[k.dst_arg] = d;
    if (k.scratch)
        args[DNNL_ARG_SCRATCHPAD] = memory(memory::desc({(int64_t)k.scratch}, dt::u8, {1}), eng,
                                           work + k.scratch_off);
    k.prim.execute(f.strm, args);
    if (!direct) k.from_dst.execute(f.strm, d, out);
    f.strm.wait();
    if (k.nan_to_zero)
        byoc_dnnl::nan_to_zero(dst, (int64_t)(k.dst_given.get_size() / sizeof(float)));
}

}  // namespace dnnl_kernels

extern "C" const char *dnnl_kernels_version(void) { return "byoc-dnnl kernels 1"; }
