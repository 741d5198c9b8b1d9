// The conv family's C++ half (byoc_dnnl/kinds/conv.py): conv and deconv, a convolution's
// faster formulations (one 1x1 convolution per far-apart tap, Winograd) and its Winograd step (run_winograd).
#pragma once

#include "net.hpp"

namespace {

// A dilated 1-D convolution whose taps lie far apart in memory (dilation x channels x 4 bytes
// of TAPS_APART or more) as one 1x1 convolution per tap, each over a window of the
// channels-last source, summed in place into the destination. oneDNN's brgconv slows down as
// its taps move apart (oneDNN 3.2 on an AVX2 AMD EPYC, k=3, 128 -> 128 channels over 7500
// steps: 3.7 ms at dilation 2 to 16, 4.7 ms at 128, 7.7 ms from 512 on), while a tap is a
// dense brgemm whatever the dilation (the three: 3.9 to 4.0 ms at any dilation). The crossover
// measured there sits at 16 to 32 KiB apart for 32 to 256 channels. A padded convolution reads a
// zero-bordered copy of its source. Returns false (nothing added) when the convolution does
// not fit (grouped, a batch) or oneDNN has no fast 1x1 convolution here.
constexpr int64_t TAPS_APART = 32 * 1024;

bool lower_conv_taps(Net &n, const Op &op, const std::vector<Post> &posts, const dims_t &strides,
                     const dims_t &dil, const dims_t &pl, const dims_t &pr,
                     const memory::desc &bias_md) {
    const int src = op.ins[0], wei = op.ins[1], bias = op.ins[2];
    const dims_t sd = n.values[src].dims, wd = n.values[wei].dims, od = n.values[op.out].dims;
    if (op.kind != OP_CONV || sd.size() != 3 || wd.size() != 3 || wd[1] != sd[1] || wd[2] < 2 ||
        od.size() != 3 || od[0] != sd[0] || od[1] != wd[0])
        return false;
    const int64_t N = sd[0], C = sd[1], K = wd[2], OC = wd[0], L = od[2], d = dil[0] + 1;
    const int64_t width = sd[2] + pl[0] + pr[0], span = (L - 1) * strides[0] + 1;
    // A batch's windows are not dense (oneDNN's brgemm convolutions decline them).
    if (N != 1 || d * C * (int64_t)sizeof(float) < TAPS_APART || L < 1 ||
        (K - 1) * d + span > width)
        return false;
    const Post accumulate{PO_SUM, 0, -1, 0.f, 0.f};
    std::vector<Post> own = posts;  // the last tap's; a residual sum is an add there (one sum)
    for (Post &p : own)
        if (p.kind == PO_SUM) p = Post{PO_BINARY, binary_id("add"), p.tensor, 0.f, 0.f};
    const memory::desc dst_md(od, dt::f32, tag::nwc), wide({N, C, width}, dt::f32, tag::nwc);
    const memory::desc window({N, C, span}, dt::f32, tag::nwc);
    // Tap k's post-ops: the first writes dst, the others add to what it holds, the last
    // applies the convolution's own post-ops.
    std::vector<std::vector<Post>> tap_posts(K);
    std::vector<convolution_forward::primitive_desc> pds;
    try {
        for (int64_t k = 0; k < K; ++k) {
            std::vector<Post> &tp = tap_posts[k];
            if (k > 0) tp.push_back(accumulate);
            if (k == K - 1) tp.insert(tp.end(), own.begin(), own.end());
            primitive_attr attr = make_attr(n, tp, true, &dst_md, od);
            auto kind = prop_kind::forward_inference;
            auto alg = algorithm::convolution_direct;
            pds.push_back(k == 0 && bias >= 0
                              ? convolution_forward::primitive_desc(
                                    n.eng, kind, alg, window, any({OC, C, 1}), bias_md, dst_md,
                                    strides, {0}, {0}, {0}, attr)
                              : convolution_forward::primitive_desc(
                                    n.eng, kind, alg, window, any({OC, C, 1}), dst_md, strides,
                                    {0}, {0}, {0}, attr));
            if (is_reference(pds.back()) || is_gemm(pds.back())) return false;
        }
    } catch (const dnnl::error &) {
        return false;
    }
    int s = ensure_md(n, src, channels_last(sd));
    if (pl[0] > 0 || pr[0] > 0) {  // the zero padding, made once a run by one concat
        std::vector<int> parts;
        if (pl[0] > 0) parts.push_back(zeros(n, memory::desc({N, C, pl[0]}, dt::f32, tag::nwc)));
        parts.push_back(s);
        if (pr[0] > 0) parts.push_back(zeros(n, memory::desc({N, C, pr[0]}, dt::f32, tag::nwc)));
        std::vector<memory::desc> mds;
        std::vector<std::pair<int, int>> args;
        for (size_t i = 0; i < parts.size(); ++i) {
            mds.push_back(n.values[parts[i]].md);
            args.push_back({DNNL_ARG_MULTIPLE_SRC + (int)i, parts[i]});
        }
        auto cpd = concat::primitive_desc(n.eng, wide, 2, mds, plain_attr());
        s = new_value(n, {N, C, width}, wide);
        args.push_back({DNNL_ARG_DST, s});
        n.scratch_size = std::max(n.scratch_size, cpd.scratchpad_desc().get_size());
        push(n, concat(cpd), args);
    }
    set_out(n, op.out, dst_md);
    for (int64_t k = 0; k < K; ++k) {
        int win = view_of(n, s, window);
        n.values[win].skip = (size_t)(k * d * C) * sizeof(float);
        int wk = view_of(n, wei, n.values[wei].md.submemory_desc({OC, C, 1}, {0, 0, k}));
        std::vector<std::pair<int, int>> args = {
            {DNNL_ARG_SRC, win}, {DNNL_ARG_WEIGHTS, ensure_md(n, wk, pds[k].weights_desc())}};
        if (k == 0 && bias >= 0) args.push_back({DNNL_ARG_BIAS, bias});
        post_args(n, tap_posts[k], dst_md, op.out, args);
        args.push_back({DNNL_ARG_DST, op.out});
        n.scratch_size = std::max(n.scratch_size, pds[k].scratchpad_desc().get_size());
        push(n, convolution_forward(pds[k]), args);
    }
    return true;
}

// Whether a narrow convolution (at most NARROW_CHANNELS in and out) should read its source in
// the blocked layout it already has rather than reorder it to the layout oneDNN picks (pd's).
// On AVX-512, oneDNN writes a 1-channel convolution's output blocked (nChw16c) and picks
// channels-last brgconv for the next one; at these widths its blocked kernel is as fast
// (oneDNN 3.2, AMD EPYC Zen 4, 32 -> 32 channels 3x3 over 450x60: 2.30 ms blocked, 2.41 ms
// channels-last), so the reorder of the whole activation is pure cost (bench/zoo.py, static:
// DNSMOS P.808 1.08x -> 1.02x onnxruntime). Wider layers keep oneDNN's pick: its blocked
// kernels fall behind there (512 -> 512 over 7x7: 2.32 against 1.93 ms).
constexpr int64_t NARROW_CHANNELS = 32;

bool keeps_layout(const Net &n, int src, int64_t in_channels, int64_t out_channels,
                  const primitive_desc &pd) {
    const memory::desc &have = n.values[src].md;
    return in_channels <= NARROW_CHANNELS && out_channels <= NARROW_CHANNELS &&
           have.get_inner_nblks() > 0 && pd.src_desc() != have;
}

// Winograd F(4x4, 3x3) (winograd.hpp) where it beats oneDNN 3.2's direct convolution, which
// has no Winograd kernel on x64: a 3x3, stride-1, ungrouped float32 convolution of 64 or more
// input and output channels (a multiple of 16), its source and output channels-last or nChw16c,
// on AVX-512 where the batched matmul is brgemm; over 9 or more 4x4 output tiles that save 3x
// the multiplies or more (4x on whole tiles, less where tiles overhang the edges). Measured on
// a Sapphire Rapids Xeon, 2 threads, against the direct brgconv: 64 -> 64 channels over 56x56
// 0.60 -> 0.36 ms, 128 over 28x28 0.60 -> 0.29, 256 over 14x14 0.58 -> 0.41, 512 over 12x12
// 1.87 -> 1.05, 256 over 40x40 5.0 -> 2.0. Not taken: 32 channels (the transforms cost what the
// matmul saves: 32 over 160x160 1.3 -> 1.5 ms), 4 tiles (the transformed weights, 4x the direct
// kernel's bytes, are read for little work: 512 over 7x7 0.62 -> 0.73, 256 over 8x8 0.18 ->
// 0.20), 10x10 outputs (9 tiles for 100 pixels: 1.08 -> 1.06).
// A 3-tap, stride-1 Conv1d runs as F(4, 3) on the same terms (2x fewer multiplies on whole
// tiles; tiles of 4 outputs), from 128 channels: four such layers with ReLU, channels x length
// 256K, 64 channels 1.24 -> 1.27 ms (not taken), 128 2.19 -> 1.78, 256 4.35 -> 2.89, 512 8.52
// -> 5.11 (onnxruntime 11.2).
// The rounding differs from the direct kernel's by about 1e-5 of the output's magnitude.
// Post-ops in the output transform: a bias, ReLU, clip, linear, sigmoid, swish (SiLU), hard
// sigmoid, hard swish and one full-size add (a residual); others after it. Returns false
// (nothing added) when the convolution does not fit.
constexpr int64_t WINO_MIN_CHANNELS = 64, WINO_MIN_CHANNELS_1D = 128, WINO_MIN_TILES = 9;
// Tiles per matmul: their transformed source and products take at most this, or the
// transformed weights' size (read again for every block). Larger blocks ran faster up to all
// the tiles at once: 64 over 56x56, 196 tiles, 0.40 ms in three blocks of 1.5 MB, 0.36 in one.
constexpr size_t WINO_BLOCK_BYTES = 1 << 22;

// A Winograd step, block of tiles by block: each transform in parallel over the tiles and
// channel blocks, the matmul on all threads between them.
void run_winograd(Net &n, Arena &a, size_t i) {
    const Step &s = n.steps[i];
    const WinoPlan &plan = n.winos[s.wino];
    const byoc_wino::Geometry &g = plan.g;
    auto &args = a.args[i];
    float *v = (float *)args[DNNL_ARG_SRC].get_data_handle();
    const float *m = (const float *)args[DNNL_ARG_DST].get_data_handle();
    auto plane = [&](int value, int64_t H, int64_t W, int64_t C, bool blocked) {
        return byoc_wino::Plane{(float *)a.mems[value].get_data_handle(), H, W, C, blocked};
    };
    const byoc_wino::Plane src = plane(s.a, g.H, g.W, g.C, plan.src_blocked),
                           dst = plane(s.b, g.OH, g.OW, g.K, plan.dst_blocked),
                           addend = s.c >= 0 ? plane(s.c, g.OH, g.OW, g.K, plan.dst_blocked)
                                             : byoc_wino::Plane{};
    const float *bias = s.d >= 0 ? (const float *)a.mems[s.d].get_data_handle() : nullptr;
    for (int64_t t0 = 0; t0 < g.tiles; t0 += plan.block) {
        const int64_t count = std::min(plan.block, g.tiles - t0);
        byoc_wino::transform_input(g, src, t0, count, plan.block, v);
        s.prim.execute(a.strm, args);
        a.strm.wait();
        byoc_wino::transform_output(g, m, t0, count, plan.block, bias, plan.posts, addend, dst);
    }
}

bool lower_winograd(Net &n, const Op &op, const std::vector<Post> &posts, const dims_t &strides,
                    const dims_t &dil, const dims_t &pl, const dims_t &pr, int bias,
                    const primitive_desc &pd) {
    const dims_t sd = n.values[op.ins[0]].dims, wd = n.values[op.ins[1]].dims,
                 od = n.values[op.out].dims;
    const int dims = (int)sd.size() - 2;
    if (op.kind != OP_CONV || n.bf16 || (dims != 1 && dims != 2) || wd.size() != sd.size() ||
        wd[1] != sd[1] || !n.winograd || !__builtin_cpu_supports("avx512f"))
        return false;
    for (int i = 0; i < dims; ++i)
        if (wd[2 + i] != 3 || strides[i] != 1 || dil[i] != 0 || pl[i] > 2 || pr[i] > 2)
            return false;
    const int64_t C = sd[1], K = od[1], P = byoc_wino::points(dims);
    const int64_t OH = dims == 2 ? od[2] : 1, OW = od[dims + 1];
    const int64_t tiles_w = (OW + 3) / 4, per_image = (OH + 3) / 4 * tiles_w;
    const int64_t tile_outputs = dims == 2 ? 16 : 4;
    const int64_t least = dims == 2 ? WINO_MIN_CHANNELS : WINO_MIN_CHANNELS_1D;
    if (C % 16 || K % 16 || C < least || K < least ||
        per_image * sd[0] < WINO_MIN_TILES || 4 * OH * OW < 3 * tile_outputs * per_image)
        return false;
    auto layout = [dims](const memory::desc &md, bool &blocked) {
        const dims_t d = md.get_dims();
        blocked = md == memory::desc(d, dt::f32, dims == 2 ? tag::nChw16c : tag::nCw16c);
        return blocked || md == memory::desc(d, dt::f32, dims == 2 ? tag::nhwc : tag::nwc);
    };
    WinoPlan plan;
    const memory::desc dst_md = pd.dst_desc();
    if (!layout(pd.src_desc(), plan.src_blocked) || !layout(dst_md, plan.dst_blocked)) return false;
    // The post-ops the output transform applies; when one is not among them, all run after it
    // as one binary kernel (dst + 0, in place) with the post-ops oneDNN's own kernels apply.
    const Post *add = nullptr;  // the one full-size add the output transform reads
    std::vector<Post> after;
    for (const Post &p : posts) {
        byoc_wino::Post w;
        const algorithm alg = p.kind == PO_ELTWISE ? eltwise_alg(p.alg) : algorithm::undef;
        if (alg == algorithm::eltwise_relu) w.kind = byoc_wino::Post::RELU;
        else if (alg == algorithm::eltwise_clip_v2) w.kind = byoc_wino::Post::CLIP;
        else if (alg == algorithm::eltwise_linear) w.kind = byoc_wino::Post::LINEAR;
        else if (alg == algorithm::eltwise_logistic) w.kind = byoc_wino::Post::LOGISTIC;
        else if (alg == algorithm::eltwise_swish) w.kind = byoc_wino::Post::SWISH;
        else if (alg == algorithm::eltwise_hardsigmoid) w.kind = byoc_wino::Post::HARDSIGMOID;
        else if (alg == algorithm::eltwise_hardswish) w.kind = byoc_wino::Post::HARDSWISH;
        else if (p.kind == PO_ELTWISE || add) after = posts;
        else if (p.kind == PO_SUM || (binary_alg(p.alg) == algorithm::binary_add &&
                                      n.values[p.tensor].dims == od)) {
            w.kind = byoc_wino::Post::ADD;
            add = &p;
        } else after = posts;
        w.alpha = p.alpha;
        w.beta = p.beta;
        plan.posts.push_back(w);
    }
    std::optional<binary::primitive_desc> bpd;
    const memory::desc zero_md = plain(dims_t(od.size(), 1));
    if (!after.empty()) {
        plan.posts.clear();
        add = nullptr;
        for (Post &p : after) {
            if (p.kind == PO_SUM && p.tensor < 0) return false;  // dst's old value: overwritten
            if (p.kind == PO_SUM) p = Post{PO_BINARY, binary_id("add"), p.tensor, 0.f, 0.f};
        }
        bpd = binary::primitive_desc(n.eng, algorithm::binary_add, dst_md, zero_md, dst_md,
                                     make_attr(n, after, false, &dst_md, od));
        if (byoc_dnnl::is_slow(*bpd)) return false;
    }
    const int64_t tiles = per_image * sd[0];
    const size_t budget = std::max(WINO_BLOCK_BYTES, (size_t)(P * C * K * 4));
    const int64_t most = std::max<int64_t>(1, budget / (P * (C + K) * 4));
    const int64_t blocks = (tiles + most - 1) / most;
    plan.block = (tiles + blocks - 1) / blocks;
    const memory::desc v_md({P, plan.block, C}, dt::f32, tag::abc),
        m_md({P, plan.block, K}, dt::f32, tag::abc);
    auto mpd = matmul::primitive_desc(n.eng, v_md, any({P, C, K}), m_md, plain_attr());
    if (is_reference(mpd) || is_gemm(mpd)) return false;
    // Committed: the weights transformed once, the operands in the layouts the plan reads.
    const int w = ensure_plain(n, op.ins[1]);
    const std::vector<float> u = byoc_wino::transform_weights(
        (const float *)(n.values[root(n, w)].data.get() + skipped(n, w)), K, C, dims);
    const int u_md = const_from(n, memory::desc({P, C, K}, dt::f32, tag::abc), u.data(),
                                mpd.weights_desc());
    Step s;
    s.run = run_winograd;
    s.a = ensure_md(n, op.ins[0], pd.src_desc());
    s.b = op.out;
    s.c = !add ? -1 : add->tensor < 0 ? op.out : ensure_md(n, add->tensor, dst_md);
    s.d = bias;
    if (bias >= 0 && !is_plain(n, bias)) s.d = ensure_plain(n, bias);
    const int64_t H = dims == 2 ? sd[2] : 1, top = dims == 2 ? pl[0] : 0;
    plan.g = {dims, C, K, H, sd[dims + 1], OH, OW, top, pl[dims - 1], tiles_w, per_image, tiles};
    s.prim = matmul(mpd);
    s.args = {{DNNL_ARG_SRC, new_value(n, v_md.get_dims(), v_md)},
              {DNNL_ARG_WEIGHTS, u_md},
              {DNNL_ARG_DST, new_value(n, m_md.get_dims(), m_md)}};
    s.wino = (int)n.winos.size();
    n.winos.push_back(plan);
    set_out(n, op.out, dst_md);
    n.scratch_size = std::max(n.scratch_size, mpd.scratchpad_desc().get_size());
    n.steps.push_back(s);
    if (bpd) {
        std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC_0, op.out},
                                                 {DNNL_ARG_SRC_1, zeros(n, zero_md)}};
        post_args(n, after, dst_md, op.out, args);
        args.push_back({DNNL_ARG_DST, op.out});
        n.scratch_size = std::max(n.scratch_size, bpd->scratchpad_desc().get_size());
        push(n, binary(*bpd), args);
    }
    return true;
}

void lower_conv(Net &n, const Op &op) {
    std::vector<Post> posts;
    auto [ia, fa] = read_posts(n, op, posts);
    (void)fa;
    if (op.ins.size() != 3) fail("conv takes src, weights, bias");
    int src = op.ins[0], wei = op.ins[1], bias = op.ins[2];
    check_value(n, src, "conv src");
    check_value(n, wei, "conv weights");
    if (n.values[root(n, wei)].kind != CONST) fail("conv weights must be constant");
    const dims_t sd = n.values[src].dims;
    if (sd.size() < 3 || sd.size() > 5) fail("conv src must have 3 to 5 dims");
    size_t k = sd.size() - 2, at = ia;
    dims_t strides = take(op.ip, at, k), dil = take(op.ip, at, k), pl = take(op.ip, at, k),
           pr = take(op.ip, at, k);
    const dims_t od = n.values[op.out].dims;
    primitive_attr attr = make_attr(n, posts, true, nullptr, od);
    memory::desc bias_md;
    if (bias >= 0) {
        check_value(n, bias, "conv bias");
        if (n.values[root(n, bias)].kind != CONST) fail("conv bias must be constant");
        bias_md = n.values[bias].md;
    }
    if (lower_conv_taps(n, op, posts, strides, dil, pl, pr, bias_md)) return;
    const dims_t wd = n.values[wei].dims;
    auto make = [&](const memory::desc &s, const memory::desc &w, const memory::desc &d,
                    const primitive_attr &a) -> primitive_desc {
        if (op.kind == OP_CONV) {
            if (bias >= 0)
                return convolution_forward::primitive_desc(
                    n.eng, prop_kind::forward_inference, algorithm::convolution_direct, s, w,
                    bias_md, d, strides, dil, pl, pr, a);
            return convolution_forward::primitive_desc(n.eng, prop_kind::forward_inference,
                                                       algorithm::convolution_direct, s, w, d,
                                                       strides, dil, pl, pr, a);
        }
        if (bias >= 0)
            return deconvolution_forward::primitive_desc(
                n.eng, prop_kind::forward_inference, algorithm::deconvolution_direct, s, w,
                bias_md, d, strides, dil, pl, pr, a);
        return deconvolution_forward::primitive_desc(n.eng, prop_kind::forward_inference,
                                                     algorithm::deconvolution_direct, s, w, d,
                                                     strides, dil, pl, pr, a);
    };
    memory::desc src_md = any(sd);
    primitive_desc pd = make(src_md, any(wd), any(od), attr);
    if (keeps_layout(n, src, sd[1], od[1], pd)) {
        try {
            primitive_desc kept = make(n.values[src].md, any(wd), any(od), attr);
            if (!byoc_dnnl::is_slow(kept) && !is_gemm(kept)) {
                pd = kept;
                src_md = n.values[src].md;
            }
        } catch (const dnnl::error &) {  // no kernel for that layout: the reorder stays
        }
    }
    memory::desc dst_md = pd.dst_desc();
    bool has_full_binary = false;
    for (const Post &p : posts)
        if (p.kind == PO_BINARY && n.values[p.tensor].dims == od) has_full_binary = true;
    if (has_full_binary) {  // describe full-size operands in the chosen dst layout
        attr = make_attr(n, posts, true, &dst_md, od);
        pd = make(src_md, any(wd), dst_md, attr);
    }
    if (lower_winograd(n, op, posts, strides, dil, pl, pr, bias, pd)) return;
    int s = ensure_md(n, src, pd.src_desc());
    int w = ensure_md(n, wei, pd.weights_desc());
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, s}, {DNNL_ARG_WEIGHTS, w}};
    if (bias >= 0) args.push_back({DNNL_ARG_BIAS, bias});
    set_out(n, op.out, pd.dst_desc());
    post_args(n, posts, pd.dst_desc(), op.out, args);
    args.push_back({DNNL_ARG_DST, op.out});
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    push(n, primitive(pd), args);
}

// A deconvolution (lower_conv reads op.kind).
void lower_deconv(Net &n, const Op &op) { lower_conv(n, op); }

}  // namespace
