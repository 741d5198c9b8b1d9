// The matmul family's C++ half (byoc_dnnl/kinds/matmul.py): matmul, and the dense layer's
// helpers int8.hpp's qmatmul shares (a dense layer as a 1x1 convolution over its rows).
#pragma once

#include "net.hpp"

namespace {

// A dense layer's post-op operands in the terms of its 1x1 convolution (dst dims cd = {1, N,
// rows}) or its 2-D matmul ({rows, N}): full size, or one value per channel. False when one
// does not fit.
bool conv_post_dims(const Net &n, const std::vector<Post> &posts, const dims_t &od,
                    const dims_t &cd, std::vector<dims_t> &post_dims) {
    const size_t r = od.size();
    for (const Post &p : posts) {
        if (p.kind == PO_ELTWISE) {
            post_dims.push_back({});
            continue;
        }
        const dims_t d = n.values[p.tensor].dims;
        if (d == od) {
            post_dims.push_back(cd);
            continue;
        }
        if (d.size() != r || (d[r - 1] != cd[1] && d[r - 1] != 1) || p.kind == PO_SUM) return false;
        for (size_t i = 0; i + 1 < r; ++i)
            if (d[i] != 1) return false;
        dims_t channel(cd.size(), 1);
        channel[1] = d[r - 1];
        post_dims.push_back(channel);
    }
    return true;
}

// The post-ops with their operands viewed in those terms (same storage; dst layout dst_md).
std::vector<Post> conv_posts(Net &n, const std::vector<Post> &posts,
                             const std::vector<dims_t> &post_dims, const memory::desc &dst_md) {
    std::vector<Post> cposts = posts;
    for (size_t i = 0; i < posts.size(); ++i)
        if (posts[i].kind != PO_ELTWISE) {
            const dims_t &d = post_dims[i];
            const memory::desc md = d == dst_md.get_dims() ? dst_md : plain(d);
            cposts[i].tensor = view_of(n, ensure_plain(n, posts[i].tensor), md);
        }
    return cposts;
}

// A dense layer's step (pd: its 1x1 convolution, or its matmul of the rows; its source and
// weights in args): its bias as a vector of the N columns, its post-ops, its destination (the
// output's rows, nwc or row-major: the same storage).
void push_dense(Net &n, const Op &op, const primitive_desc &pd,
                std::vector<std::pair<int, int>> args, const std::vector<Post> &posts,
                const std::vector<dims_t> &post_dims) {
    const memory::desc dst_md = pd.dst_desc(), fmd = retyped(n, dst_md, dt::f32);
    const int64_t N = dst_md.get_dims()[1];
    if (int bias = op.ins[2]; bias >= 0) {
        check_value(n, bias, "dense bias");
        int64_t count = 1;
        for (auto x : n.values[bias].dims) count *= x;
        if (count != N) fail("a dense bias must have one value per output column");
        const dims_t bd = pd.weights_desc(1).get_dims();  // {N} or {1, N}
        args.push_back({DNNL_ARG_BIAS, view_of(n, ensure_plain(n, bias), plain(bd))});
    }
    set_out(n, op.out, retyped(n, plain(n.values[op.out].dims), dst_md.get_data_type()));
    int dst = view_of(n, op.out, dst_md);
    post_args(n, conv_posts(n, posts, post_dims, fmd), fmd, dst, args);
    args.push_back({DNNL_ARG_DST, dst});
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    push(n, primitive(pd), args);
}

// A dense layer (constant weights, broadcast over the rows) as a 1x1 convolution whose spatial
// dim is the rows: the rows' row-major layout is the convolution's nwc, so nothing is reordered.
// Used when oneDNN has no brgemm matmul for this CPU and would run its generic gemm:jit kernel
// (oneDNN 3.2 on AVX2), while its 1x1 convolution is brgemm there (MiniLM's 128x384 by 384x1536
// layer on AVX2: 3.6 ms as a matmul, 1.4 ms as a convolution). Below 64 input or output
// channels, or with one row, the convolution is not faster. Returns false (nothing added) when
// the shapes or the post-ops do not fit, or oneDNN has no fast convolution for them either.
bool lower_dense_as_conv(Net &n, const Op &op, const std::vector<Post> &posts,
                         const matmul::primitive_desc &mpd) {
    if (std::string(mpd.impl_info_str()).find("brg") != std::string::npos) return false;
    int a = op.ins[0], b = op.ins[1], bias = op.ins[2];
    const dims_t od = n.values[op.out].dims, ad = n.values[a].dims, bd = n.values[b].dims;
    const size_t r = od.size();
    if (n.values[root(n, b)].kind != CONST) return false;
    const int64_t K = ad[r - 1], N = od[r - 1];
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < r; ++i) {
        if (ad[i] != od[i] || (i + 2 < r && bd[i] != 1)) return false;
        rows *= od[i];
    }
    if (rows < 2 || K < 64 || N < 64) return false;
    const dims_t cd = {1, N, rows};
    const memory::desc dst_md(cd, dt::f32, tag::nwc);
    std::vector<dims_t> post_dims;
    if (!conv_post_dims(n, posts, od, cd, post_dims)) return false;
    primitive_attr attr = make_attr(n, posts, true, &dst_md, cd, post_dims);
    const memory::desc src_md({1, K, rows}, dt::f32, tag::nwc);
    const memory::desc bias_md = plain({N});
    convolution_forward::primitive_desc pd;
    try {
        pd = bias >= 0 ? convolution_forward::primitive_desc(
                             n.eng, prop_kind::forward_inference, algorithm::convolution_direct,
                             src_md, any({N, K, 1}), bias_md, dst_md, {1}, {0}, {0}, attr)
                       : convolution_forward::primitive_desc(
                             n.eng, prop_kind::forward_inference, algorithm::convolution_direct,
                             src_md, any({N, K, 1}), dst_md, {1}, {0}, {0}, attr);
    } catch (const dnnl::error &) {
        return false;
    }
    if (is_reference(pd) || is_gemm(pd)) return false;
    // Views of the matmul's tensors in the convolution's terms (same storage).
    int src = view_of(n, ensure_plain(n, a), src_md);
    int wt = view_of(n, ensure_plain(n, b), memory::desc({N, K, 1}, dt::f32, {1, N, 1}));
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, src},
                                             {DNNL_ARG_WEIGHTS, ensure_md(n, wt, pd.weights_desc())}};
    push_dense(n, op, pd, args, posts, post_dims);
    return true;
}

// A matmul's transpose (fusion.py): after the post-ops, one permutation for each of a, b and
// the destination, each a count (0: none; artifacts before them have none) and the perm.
dims_t read_perm(const Op &op, size_t &at, size_t rank) {
    if (at >= op.ip.size()) return {};
    const int64_t count = op.ip[at++];
    if (count != 0 && count != (int64_t)rank) fail("matmul: a permutation of the wrong rank");
    return take(op.ip, at, (size_t)count);
}

// A matmul; an operand the graph transposed first is read through a strided view of the
// transpose's source, and a destination the graph transposes next is written through one
// (attention's heads: no copies).
void lower_matmul(Net &n, const Op &op) {
    std::vector<Post> posts;
    size_t at = read_posts(n, op, posts).first;
    if (op.ins.size() != 3) fail("matmul takes a, b, bias");
    int a = op.ins[0], b = op.ins[1], bias = op.ins[2];
    check_value(n, a, "matmul a");
    check_value(n, b, "matmul b");
    const size_t rank = n.values[op.out].dims.size();
    const dims_t pa = read_perm(op, at, rank), pb = read_perm(op, at, rank),
                 pout = read_perm(op, at, rank);
    bool bconst = n.values[root(n, b)].kind == CONST;
    if (bconst && !pb.empty()) fail("matmul: a transposed constant is folded, not viewed");
    if (!pa.empty()) a = ensure_plain(n, a);
    if (!pb.empty()) b = ensure_plain(n, b);
    const memory::desc amd = pa.empty() ? plain(n.values[a].dims) : permuted(n.values[a].dims, pa);
    const memory::desc bmd = pb.empty() ? plain(n.values[b].dims) : permuted(n.values[b].dims, pb);
    const memory::desc dst_md =
        pout.empty() ? plain(n.values[op.out].dims) : permuted(n.values[op.out].dims, inverse(pout));
    const dims_t od = dst_md.get_dims();
    if (od.size() < 2 || amd.get_ndims() != (int)od.size() || bmd.get_ndims() != (int)od.size())
        fail("matmul operands must have the output's rank (>= 2)");
    primitive_attr attr = make_attr(n, posts, true, &dst_md, od);
    // A dense layer in bf16 by types (typed_bf16): its source rounded once a run, its weights
    // once; float32 out. A product of two activations (attention's) stays float32.
    const bool typed = n.typed_bf16 && bconst && pa.empty();
    const memory::desc smd = typed ? retyped(n, amd, dt::bf16) : amd;
    memory::desc wmd = bconst ? memory::desc(n.values[b].dims, typed ? dt::bf16 : dt::f32, tag::any)
                              : bmd;
    matmul::primitive_desc pd;
    if (bias >= 0) {
        check_value(n, bias, "matmul bias");
        pd = matmul::primitive_desc(n.eng, smd, wmd, plain(n.values[bias].dims), dst_md, attr);
    } else {
        pd = matmul::primitive_desc(n.eng, smd, wmd, dst_md, attr);
    }
    if (bconst && !typed && pa.empty() && pout.empty() && lower_dense_as_conv(n, op, posts, pd))
        return;
    int sa = typed ? ensure_md(n, a, smd) : pa.empty() ? ensure_plain(n, a) : view_of(n, a, amd);
    int sb = pb.empty() ? ensure_md(n, b, pd.weights_desc()) : view_of(n, b, bmd);
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, sa}, {DNNL_ARG_WEIGHTS, sb}};
    if (bias >= 0) args.push_back({DNNL_ARG_BIAS, ensure_plain(n, bias)});
    int dst = op.out;
    if (pout.empty()) {
        set_out(n, op.out, pd.dst_desc());
    } else {
        set_out(n, op.out, plain(n.values[op.out].dims));
        dst = view_of(n, op.out, dst_md);
    }
    post_args(n, posts, pd.dst_desc(), dst, args);
    args.push_back({DNNL_ARG_DST, dst});
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    push(n, matmul(pd), args);
}

}  // namespace
