// The int8 family's C++ half (byoc_dnnl/kinds/int8.py): qmatmul and qconv, the dynamic
// quantization of their sources, and their steps run_qparams and run_qbias.
#pragma once

#include "net.hpp"
#include "matmul.hpp"  // push_dense, conv_post_dims

namespace {

// An int8 value held as a float (quantized weights and zero points arrive as float32).
bool int8(float v) { return v >= -128.f && v <= 127.f && v == std::nearbyint(v); }

// DynamicQuantizeLinear's scale and zero point from the range [min, max] (onnxruntime's formula:
// the range stretched to hold 0, the zero point rounded half to even).
void run_qparams(Net &n, Arena &a, size_t i) {
    const memory &range = a.mems[n.steps[i].a], &params = a.mems[n.steps[i].b];
    const float *r = (const float *)range.get_data_handle();
    float lo = std::min(r[0], 0.f), hi = std::max(r[1], 0.f);
    float scale = hi == lo ? 1.f : (hi - lo) / 255.f;
    float zp = std::nearbyint(std::clamp(0.f - lo / scale, 0.f, 255.f));
    if (!(zp >= 0.f && zp <= 255.f)) zp = 0.f;  // a range that is not finite
    float *p = (float *)params.get_data_handle();
    p[0] = scale;
    int32_t z = (int32_t)zp;
    std::memcpy(p + 1, &z, sizeof z);
    p[2] = zp;
}

// Tensor `src` quantized the way ONNX's DynamicQuantizeLinear does, once per tensor however many
// layers read it: oneDNN's min and max reductions find its range, a custom step (run_qparams) turns
// it into the scale and zero point, and a binary division by the scale, rounded half to even,
// plus the zero point, writes the u8 tensor. (One hand-written pass for min and max, compiled
// for SSE2, ran slower than the two reductions, jitted for the CPU. A reorder with the scale
// multiplies by its reciprocal instead of dividing, and rounded some values to the other side
// of a half: a quantized convolution net's outputs then differed from onnxruntime's.)
Quantized quantize_dynamic(Net &n, int x, bool own_order) {
    for (const Quantized &c : n.quantized)
        if (c.src == x &&
            (own_order || n.values[c.q].md.get_strides() == plain(n.values[x].dims).get_strides()))
            return c;
    const dims_t d = n.values[x].dims, ones(d.size(), 1);
    int64_t count = 1;
    for (auto e : d) count *= e;
    // own_order (a convolution's source): a dense tensor is quantized in its own order of dims
    // (a convolution's channels-last output stays channels-last, which the next int8
    // convolution reads); a blocked or padded one, or a dense layer's rows, is plain first.
    const memory::desc &xmd = n.values[x].md;
    const bool dense = xmd.get_inner_nblks() == 0 && xmd.get_size() == (size_t)count * sizeof(float);
    int xp = own_order && dense ? x : ensure_plain(n, x);
    const memory::desc qmd(d, dt::u8, n.values[xp].md.get_strides());
    // [min, max] as two floats of one tensor; [scale, zero point, zero point] as a float, an
    // int32 (the layers' runtime argument) and a float (the quantization's operand).
    int range = new_value(n, {2}, plain({2})), params = new_value(n, {3}, plain({3}));
    int lo = view_of(n, range, plain({1, 1})), hi = view_of(n, range, plain({1, 1}));
    int scale = view_of(n, params, plain({1})), divisor = view_of(n, params, plain(ones));
    int zp = view_of(n, params, memory::desc({1}, dt::s32, tag::a));
    int addend = view_of(n, params, plain(ones));
    n.values[hi].skip = n.values[zp].skip = sizeof(float);
    n.values[addend].skip = 2 * sizeof(float);
    // The range of the dense buffer, viewed as one row: oneDNN's jit reduction over all dims
    // of some shapes (1x60x1x40) is its reference loop.
    const int flat = view_of(n, xp, plain({1, count}));
    for (auto [alg, out] : {std::pair{algorithm::reduction_min, lo}, {algorithm::reduction_max, hi}}) {
        reduction::primitive_desc pd(n.eng, alg, plain({1, count}), plain({1, 1}), 0.f, 0.f,
                                     plain_attr());
        n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
        push(n, reduction(pd), {{DNNL_ARG_SRC, flat}, {DNNL_ARG_DST, out}});
    }
    Step s;
    s.run = run_qparams;
    s.a = range;
    s.b = params;
    n.steps.push_back(s);
    int q = new_value(n, d, qmd);
    primitive_attr attr = plain_attr();
    post_ops po;
    po.append_eltwise(algorithm::eltwise_round, 0.f, 0.f);
    po.append_binary(algorithm::binary_add, plain(ones));
    attr.set_post_ops(po);
    binary::primitive_desc pd(n.eng, algorithm::binary_div, n.values[xp].md, plain(ones), qmd, attr);
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    push(n, binary(pd), {{DNNL_ARG_SRC_0, xp},
                         {DNNL_ARG_SRC_1, divisor},
                         {DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1, addend},
                         {DNNL_ARG_DST, q}});
    n.quantized.push_back({x, q, scale, zp});
    return n.quantized.back();
}

// A QuantizeLinear's integers `q` (u8 or s8) read as they are by an int8 kernel: their scale
// and zero point (from the kernel's floats at fp[at]) as constants, checked.
Quantized static_source(Net &n, int q, const std::vector<float> &fp, size_t at, const char *what) {
    const dt t = n.values[q].md.get_data_type();
    if (t != dt::u8 && t != dt::s8) fail(std::string(what) + ": a static source is a u8 or s8 tensor");
    if (fp.size() != at + 2) fail(std::string(what) + ": bad static source");
    const float sx = fp[at], zx = fp[at + 1];
    const bool u8 = t == dt::u8;
    if (!(sx > 0.f) || !std::isfinite(sx) || zx != std::nearbyint(zx) ||
        zx < (u8 ? 0.f : -128.f) || zx > (u8 ? 255.f : 127.f))
        fail(std::string(what) + ": the source's scale must be positive and its zero point fit its type");
    Quantized out{q, q, zeros(n, plain({1})), zeros(n, memory::desc({1}, dt::s32, tag::a))};
    *(float *)n.values[out.scale].data.get() = sx;
    *(int32_t *)n.values[out.zp].data.get() = (int32_t)zx;
    return out;
}

// A dense layer of dynamically quantized int8 (onnxruntime's quantize_dynamic: MatMulInteger of
// the u8 activation and s8 weights, times the activation's and weights' scales, plus a bias) as
// an int8 1x1 convolution over the rows, like lower_dense_as_conv: its runtime source scale and
// zero point come from quantize_dynamic, the weights' scale (one, or one per column) is constant.
// Weights with a zero point (a fifth input; uint8 weights arrive shifted to int8) run as an int8
// matmul of the rows instead: oneDNN 3.2's convolutions take no weights zero point.
// A static source and a u8 or s8 destination as lower_qconv's (after the post-ops: a flag and
// the output's type; the source's scale and zero point after the post-ops' floats).
void lower_qmatmul(Net &n, const Op &op) {
    std::vector<Post> posts;
    auto [at, fat] = read_posts(n, op, posts);
    if (op.ins.size() != 4 && op.ins.size() != 5)
        fail("qmatmul takes a, b, bias, b's scale and optionally b's zero point");
    int a = op.ins[0], b = op.ins[1], bias = op.ins[2], bs = op.ins[3];
    const bool fixed = at < op.ip.size() && op.ip[at] != 0;
    const dt out_t = at + 1 < op.ip.size() ? dst_type(op.ip[at + 1]) : dt::f32;
    const dt src_t = n.values[a].md.get_data_type();
    if (fixed != (src_t != dt::f32)) fail("qmatmul: a static source is a u8 or s8 tensor");
    int bz = op.ins.size() == 5 ? op.ins[4] : -1;
    check_value(n, a, "qmatmul a");
    check_value(n, b, "qmatmul b");
    check_value(n, bs, "qmatmul scale");
    if (n.values[root(n, b)].kind != CONST || n.values[root(n, bs)].kind != CONST)
        fail("qmatmul: the weights and their scale must be constants");
    const dims_t od = n.values[op.out].dims, ad = n.values[a].dims, bd = n.values[b].dims;
    const size_t r = od.size();
    if (r < 2 || ad.size() != r || bd.size() != 2 || bd[0] != ad[r - 1] || bd[1] != od[r - 1])
        fail("qmatmul: a is (..., K), b is (K, N) and the output (..., N)");
    const int64_t K = bd[0], N = bd[1];
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < r; ++i) {
        if (ad[i] != od[i]) fail("qmatmul: a and the output differ outside the last dim");
        rows *= od[i];
    }
    int64_t scales = 1;
    for (auto x : n.values[bs].dims) scales *= x;
    if (scales != 1 && scales != N) fail("qmatmul: the weights' scale must be one or one per column");
    b = ensure_plain(n, b);  // (K, N) rows
    const float *wv = (const float *)(n.values[root(n, b)].data.get() + skipped(n, b));
    for (int64_t i = 0; i < K * N; ++i)
        if (!int8(wv[i])) fail("qmatmul: a weight is not an int8 value");
    if (bz >= 0) {
        check_value(n, bz, "qmatmul zero point");
        bz = ensure_plain(n, bz);
        const Value &z = n.values[bz];
        if (n.values[root(n, bz)].kind != CONST || z.dims != dims_t{1} ||
            !int8(*(const float *)(n.values[root(n, bz)].data.get() + skipped(n, bz))))
            fail("qmatmul: the weights' zero point must be one constant int8 value");
    }
    // The rows as the convolution's (1, N, rows) nwc, or the matmul's (rows, N): same storage.
    const dims_t cd = bz < 0 ? dims_t{1, N, rows} : dims_t{rows, N};
    const dt qt = fixed ? src_t : dt::u8;
    const memory::desc dst_md = memory::desc(cd, out_t, bz < 0 ? tag::nwc : tag::ab);
    const memory::desc fmd = retyped(n, dst_md, dt::f32);  // full-size post-op operands
    const memory::desc src_md = bz < 0 ? memory::desc({1, K, rows}, qt, tag::nwc)
                                       : memory::desc({rows, K}, qt, tag::ab);
    std::vector<dims_t> post_dims;
    if (!conv_post_dims(n, posts, od, cd, post_dims)) fail("qmatmul: a post-op operand does not fit");
    primitive_attr attr = make_attr(n, posts, false, &fmd, cd, post_dims);
    attr.set_scales_mask(DNNL_ARG_SRC, 0);
    // One scale per column: the convolution's weights are (N, K, 1), the matmul's (K, N).
    attr.set_scales_mask(DNNL_ARG_WEIGHTS, scales == 1 ? 0 : bz < 0 ? 1 : 2);
    attr.set_zero_points_mask(DNNL_ARG_SRC, 0);
    primitive_desc pd;
    memory::desc wf32;  // the float32 weights, viewed in the primitive's terms
    if (bz < 0) {
        const memory::desc wmd = memory::desc({N, K, 1}, dt::s8, tag::any);
        pd = bias >= 0 ? convolution_forward::primitive_desc(
                             n.eng, prop_kind::forward_inference, algorithm::convolution_direct,
                             src_md, wmd, plain({N}), dst_md, {1}, {0}, {0}, attr)
                       : convolution_forward::primitive_desc(
                             n.eng, prop_kind::forward_inference, algorithm::convolution_direct,
                             src_md, wmd, dst_md, {1}, {0}, {0}, attr);
        wf32 = memory::desc({N, K, 1}, dt::f32, {1, N, 1});
    } else {
        attr.set_zero_points_mask(DNNL_ARG_WEIGHTS, 0);
        const memory::desc wmd = memory::desc({K, N}, dt::s8, tag::any);
        pd = bias >= 0 ? matmul::primitive_desc(n.eng, src_md, wmd, plain({1, N}), dst_md, attr)
                       : matmul::primitive_desc(n.eng, src_md, wmd, dst_md, attr);
        wf32 = plain({K, N});
    }
    const Quantized q =
        fixed ? static_source(n, ensure_md(n, a, retyped(n, plain(ad), src_t)), op.fp, fat, "qmatmul")
              : quantize_dynamic(n, a, false);
    int wt = view_of(n, b, wf32);
    std::vector<std::pair<int, int>> args = {
        {DNNL_ARG_SRC, view_of(n, q.q, src_md)},
        {DNNL_ARG_WEIGHTS, ensure_md(n, wt, pd.weights_desc())},
        {DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, q.scale},
        {DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, view_of(n, ensure_plain(n, bs), plain({scales}))},
        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, q.zp}};
    if (bz >= 0)
        args.push_back({DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_WEIGHTS,
                        ensure_md(n, bz, memory::desc({1}, dt::s32, tag::a))});
    push_dense(n, op, pd, args, posts, post_dims);
}

// The bias of a convolution whose bias older onnxruntimes quantized at run time: with
// s = x's scale times the weights' (one, or one per channel), int32(floor(bias / s)) was added
// to the int32 product before it was scaled by s; here s * floor(bias / s) is the float bias.
void run_qbias(Net &n, Arena &a, size_t i) {
    const Step &s = n.steps[i];
    const memory &xscale = a.mems[s.a], &wscale = a.mems[s.b], &bias = a.mems[s.c], &out = a.mems[s.d];
    const float sx = *(const float *)xscale.get_data_handle();
    const float *sw = (const float *)wscale.get_data_handle(), *b = (const float *)bias.get_data_handle();
    float *o = (float *)out.get_data_handle();
    const int64_t count = out.get_desc().get_dims()[0];
    const bool one = wscale.get_desc().get_dims()[0] == 1;
    for (int64_t i = 0; i < count; ++i) {
        const float s = sx * sw[one ? 0 : i];
        const float q = std::floor(b[i] / s);
        // onnxruntime casts q to int32; beyond its range (or a zero scale) the cast is undefined.
        o[i] = std::isfinite(q) && std::fabs(q) < 2147483648.f ? q * s : 0.f;
    }
}

// A convolution of dynamically quantized int8 (quantize_dynamic's ConvInteger of the u8
// activation and s8 weights, times both scales, plus a bias), as lower_qmatmul: the source is
// quantized at run time (quantize_dynamic), then reordered into the layout the int8
// convolution picks (a u8 copy); the weights' scale is one, or one per output channel.
// int_bias (older onnxruntimes): the bias is int32(floor(bias / scale)) added to the product,
// computed per run by a custom step (run_qbias) as scale * floor(bias / scale).
// A weights' zero point z (a fifth input; uint8 weights arrive shifted to int8): oneDNN's int8
// convolutions take none, so the product by w - z is the product by w, plus -z times the sum of
// (x - x's zero point) over each window, which a second convolution of all-one weights (one
// output channel per group) computes, scaled by -z; a binary kernel adds the two and takes the
// post-ops (one weights' scale; groups of one output channel, or one group).
// A static source (a QuantizeLinear's u8 or s8 tensor: the source's scale and zero point follow
// the post-ops' floats) is read as it is. A u8 or s8 destination (the next QuantizeLinear's,
// whose division, rounding, zero point and clip are post-ops) is written as it is.
void lower_qconv(Net &n, const Op &op) {
    std::vector<Post> posts;
    auto [at, fat] = read_posts(n, op, posts);
    if (op.ins.size() != 4 && op.ins.size() != 5)
        fail("qconv takes src, weights, bias, the weights' scale and optionally their zero point");
    int src = op.ins[0], wei = op.ins[1], bias = op.ins[2], ws = op.ins[3];
    const int bz = op.ins.size() == 5 ? op.ins[4] : -1;
    check_value(n, src, "qconv src");
    check_value(n, wei, "qconv weights");
    check_value(n, ws, "qconv scale");
    if (n.values[root(n, wei)].kind != CONST || n.values[root(n, ws)].kind != CONST)
        fail("qconv: the weights and their scale must be constants");
    const dims_t sd = n.values[src].dims, wd = n.values[wei].dims, od = n.values[op.out].dims;
    if (sd.size() < 3 || sd.size() > 5) fail("qconv src must have 3 to 5 dims");
    const size_t k = sd.size() - 2;
    const bool grouped = wd.size() == sd.size() + 1;
    if (!grouped && wd.size() != sd.size()) fail("qconv: the weights' rank does not fit the src");
    const int64_t oc = grouped ? wd[0] * wd[1] : wd[0];
    dims_t strides = take(op.ip, at, k), dil = take(op.ip, at, k), pl = take(op.ip, at, k),
           pr = take(op.ip, at, k);
    const bool int_bias = take(op.ip, at, 1)[0] != 0;
    // Then (artifacts before static sources have neither): a static source, the output's type.
    const bool fixed = at < op.ip.size() && take(op.ip, at, 1)[0] != 0;
    const dt out_t = at < op.ip.size() ? dst_type(take(op.ip, at, 1)[0]) : dt::f32;
    const dt src_t = n.values[src].md.get_data_type();
    if (fixed != (src_t != dt::f32)) fail("qconv: a static source is a u8 or s8 tensor");
    if (fixed && int_bias) fail("qconv: a static source with a quantized bias");
    int64_t scales = 1;
    for (auto x : n.values[ws].dims) scales *= x;
    if (scales != 1 && scales != oc) fail("qconv: the weights' scale must be one or one per channel");
    wei = ensure_plain(n, wei);
    int64_t count = 1;
    for (auto x : wd) count *= x;
    const float *wv = (const float *)(n.values[root(n, wei)].data.get() + skipped(n, wei));
    for (int64_t i = 0; i < count; ++i)
        if (!int8(wv[i])) fail("qconv: a weight is not an int8 value");
    float zw = 0.f;
    if (bz >= 0) {
        check_value(n, bz, "qconv zero point");
        const int z = ensure_plain(n, bz);
        if (n.values[root(n, z)].kind != CONST || n.values[z].dims != dims_t{1})
            fail("qconv: the weights' zero point must be one constant int8 value");
        zw = *(const float *)(n.values[root(n, z)].data.get() + skipped(n, z));
        if (!int8(zw)) fail("qconv: the weights' zero point must be one constant int8 value");
        if (scales != 1) fail("qconv: a weights' zero point needs one weights' scale");
        if (grouped && wd[1] != 1) fail("qconv: a weights' zero point on groups of several channels");
    }
    if (bias >= 0) {
        check_value(n, bias, "qconv bias");
        if (n.values[bias].dims != dims_t{oc}) fail("qconv: the bias must have one value per channel");
        if (n.values[root(n, bias)].kind != CONST) fail("qconv: the bias must be constant");
    } else if (int_bias) {
        fail("qconv: a quantized bias needs the bias");
    }
    const std::vector<Post> no_posts, &conv_posts = bz < 0 ? posts : no_posts;
    auto make = [&](const dims_t &w_dims, const memory::desc &s, const memory::desc &d,
                    const std::vector<Post> &p, const memory::desc *dst_md, bool with_bias) {
        primitive_attr a = make_attr(n, p, false, dst_md, od);
        a.set_scales_mask(DNNL_ARG_SRC, 0);
        a.set_scales_mask(DNNL_ARG_WEIGHTS, scales == 1 ? 0 : grouped ? 3 : 1);
        a.set_zero_points_mask(DNNL_ARG_SRC, 0);
        const memory::desc wmd(w_dims, dt::s8, tag::any);
        return with_bias ? convolution_forward::primitive_desc(
                               n.eng, prop_kind::forward_inference, algorithm::convolution_direct,
                               s, wmd, plain({oc}), d, strides, dil, pl, pr, a)
                         : convolution_forward::primitive_desc(
                               n.eng, prop_kind::forward_inference, algorithm::convolution_direct,
                               s, wmd, d, strides, dil, pl, pr, a);
    };
    const memory::desc any_src(sd, fixed ? src_t : dt::u8, tag::any);
    const memory::desc any_dst(od, bz < 0 ? out_t : dt::f32, tag::any);
    auto pd = make(wd, any_src, any_dst, conv_posts, nullptr, bias >= 0);
    for (const Post &p : conv_posts)
        if (p.kind == PO_BINARY && n.values[p.tensor].dims == od) {
            const memory::desc dst_md = pd.dst_desc();  // full-size operands in its layout
            const memory::desc operand_md = retyped(n, dst_md, dt::f32);
            pd = make(wd, any_src, dst_md, conv_posts, &operand_md, bias >= 0);
            break;
        }
    const Quantized q =
        fixed ? static_source(n, src, op.fp, fat, "qconv") : quantize_dynamic(n, src, true);
    const int xq = ensure_md(n, q.q, pd.src_desc());
    int b = bias;
    if (int_bias) {
        b = new_value(n, {oc}, plain({oc}));
        Step s;
        s.run = run_qbias;
        s.a = q.scale;
        s.b = view_of(n, ensure_plain(n, ws), plain({scales}));
        s.c = bias;
        s.d = b;
        n.steps.push_back(s);
    }
    std::vector<std::pair<int, int>> args = {
        {DNNL_ARG_SRC, xq},
        {DNNL_ARG_WEIGHTS, ensure_md(n, wei, pd.weights_desc())},
        {DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, q.scale},
        {DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, view_of(n, ensure_plain(n, ws), plain({scales}))},
        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, q.zp}};
    if (b >= 0) args.push_back({DNNL_ARG_BIAS, ensure_plain(n, b)});
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    if (bz < 0) {
        set_out(n, op.out, pd.dst_desc());
        post_args(n, posts, retyped(n, pd.dst_desc(), dt::f32), op.out, args);
        args.push_back({DNNL_ARG_DST, op.out});
        push(n, primitive(pd), args);
        return;
    }
    const memory::desc tmd = pd.dst_desc();
    const int product = new_value(n, od, tmd);
    args.push_back({DNNL_ARG_DST, product});
    push(n, primitive(pd), args);
    // The windows' sums of x - x's zero point, times -z and the scales: all-one weights.
    dims_t ones_dims = wd, hd = od;
    if (grouped) {
        ones_dims[1] = 1;
    } else {
        ones_dims[0] = 1;
        hd[1] = 1;
    }
    int ones = zeros(n, plain(ones_dims));
    int64_t ones_count = 1;
    for (auto x : ones_dims) ones_count *= x;
    std::fill_n((float *)n.values[ones].data.get(), ones_count, 1.f);
    int hscale = zeros(n, plain({1}));
    const float *wsv = (const float *)(n.values[root(n, ws)].data.get() + skipped(n, ws));
    *(float *)n.values[hscale].data.get() = -zw * wsv[0];
    // One channel, channels last (the same bytes as plain; oneDNN has only its reference
    // kernel for a plain destination of an int8 convolution).
    const tag last = k == 1 ? tag::acb : k == 2 ? tag::acdb : tag::acdeb;
    const memory::desc hmd = grouped ? tmd : memory::desc(hd, dt::f32, last);
    auto hpd = make(ones_dims, pd.src_desc(), hmd, no_posts, nullptr, false);
    const int sums = new_value(n, hd, hpd.dst_desc());
    n.scratch_size = std::max(n.scratch_size, hpd.scratchpad_desc().get_size());
    push(n, primitive(hpd), {{DNNL_ARG_SRC, xq},
                             {DNNL_ARG_WEIGHTS, ensure_md(n, ones, hpd.weights_desc())},
                             {DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, q.scale},
                             {DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, hscale},
                             {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, q.zp},
                             {DNNL_ARG_DST, sums}});
    binary::primitive_desc bpd(n.eng, algorithm::binary_add, tmd, hpd.dst_desc(),
                               retyped(n, tmd, out_t), make_attr(n, posts, false, &tmd, od));
    std::vector<std::pair<int, int>> bargs = {{DNNL_ARG_SRC_0, product}, {DNNL_ARG_SRC_1, sums}};
    set_out(n, op.out, bpd.dst_desc());
    post_args(n, posts, tmd, op.out, bargs);
    bargs.push_back({DNNL_ARG_DST, op.out});
    n.scratch_size = std::max(n.scratch_size, bpd.scratchpad_desc().get_size());
    push(n, primitive(bpd), bargs);
}

}  // namespace
