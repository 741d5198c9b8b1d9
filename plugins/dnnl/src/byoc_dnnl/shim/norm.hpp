// The norm family's C++ half (byoc_dnnl/kinds/norm.py): softmax, safe_softmax, layernorm,
// batchnorm and lrn.
#pragma once

#include "net.hpp"

namespace {

// A safe_softmax's output, in whatever dense layout its softmax wrote: NaN -> 0 in place.
void run_nan_to_zero(Net &n, Arena &a, size_t i) {
    const memory &m = a.mems[n.steps[i].a];
    byoc_dnnl::nan_to_zero((float *)m.get_data_handle(),
                           (int64_t)(m.get_desc().get_size() / sizeof(float)));
}

// A softmax; a safe_softmax (PyTorch's _safe_softmax) then sets its NaN to 0 in place (a custom
// step): a row masked entirely with -inf gives NaN, which the model's Where(IsNaN) makes 0.
void lower_softmax(Net &n, const Op &op) {
    if (op.ins.size() != 1 || op.ip.size() != 1) fail("bad softmax op");
    check_value(n, op.ins[0], "softmax input");
    int a = op.ins[0];
    const dims_t d = n.values[a].dims;
    int64_t axis = op.ip[0];
    if (axis < 0 || axis >= (int64_t)d.size() || d != n.values[op.out].dims)
        fail("softmax: bad axis or shape");
    auto make = [&](const memory::desc &md) {
        return softmax_forward::primitive_desc(n.eng, prop_kind::forward_inference,
                                               algorithm::softmax_accurate, md, md, (int)axis,
                                               plain_attr());
    };
    // oneDNN's fast softmax wants the axis innermost: transpose it there (a reorder).
    auto pd = fast_layout(plain(d), innermost(d, (int)axis), make);
    push_src_dst<softmax_forward>(n, a, op.out, pd);
    if (op.kind != OP_SAFE_SOFTMAX) return;
    Step s;
    s.run = run_nan_to_zero;
    s.a = s.b = op.out;
    n.steps.push_back(s);
}

// A safe_softmax (lower_softmax reads op.kind).
void lower_safe_softmax(Net &n, const Op &op) { lower_softmax(n, op); }

void lower_layernorm(Net &n, const Op &op) {
    if (op.ins.size() != 3 || op.fp.size() != 1) fail("bad layernorm op");
    int a = ensure_plain(n, op.ins[0]);
    const dims_t d = n.values[a].dims;
    if (d != n.values[op.out].dims || d.size() < 2) fail("layernorm: bad shape");
    dims_t cd = {d.back()};
    normalization_flags flags = normalization_flags::none;
    if (op.ins[1] >= 0) {  // none: a group or instance normalization's rows (its affine after)
        check_value(n, op.ins[1], "layernorm scale");
        if (n.values[op.ins[1]].dims != cd) fail("layernorm: scale must have the last dim's size");
        flags = normalization_flags::use_scale;
    }
    if (op.ins[2] >= 0) {
        check_value(n, op.ins[2], "layernorm bias");
        if (n.values[op.ins[2]].dims != cd) fail("layernorm: bias must have the last dim's size");
        flags = flags | normalization_flags::use_shift;
    }
    memory::desc md = plain(d);
    auto pd = layer_normalization_forward::primitive_desc(
        n.eng, prop_kind::forward_inference, md, md, op.fp[0], flags, plain_attr());
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, a}, {DNNL_ARG_DST, op.out}};
    if (op.ins[1] >= 0) args.push_back({DNNL_ARG_SCALE, ensure_plain(n, op.ins[1])});
    if (op.ins[2] >= 0) args.push_back({DNNL_ARG_SHIFT, ensure_plain(n, op.ins[2])});
    set_out(n, op.out, pd.dst_desc());
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    push(n, layer_normalization_forward(pd), args);
}

void lower_batchnorm(Net &n, const Op &op) {
    if (op.ins.size() != 5 || op.fp.size() != 1) fail("bad batchnorm op");
    int a = op.ins[0];
    check_value(n, a, "batchnorm src");
    const dims_t d = n.values[a].dims;
    if (d != n.values[op.out].dims || d.size() < 2) fail("batchnorm: bad shape");
    for (int i = 1; i < 5; ++i) {
        check_value(n, op.ins[i], "batchnorm parameter");
        if (n.values[op.ins[i]].dims != dims_t{d[1]}) fail("batchnorm: parameters must be [C]");
    }
    memory::desc md = n.values[a].md;
    auto flags = normalization_flags::use_global_stats | normalization_flags::use_scale |
                 normalization_flags::use_shift;
    auto pd = batch_normalization_forward::primitive_desc(n.eng, prop_kind::forward_inference,
                                                          md, md, op.fp[0], flags, plain_attr());
    set_out(n, op.out, pd.dst_desc());
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    push(n, batch_normalization_forward(pd),
         {{DNNL_ARG_SRC, a}, {DNNL_ARG_DST, op.out}, {DNNL_ARG_MEAN, ensure_plain(n, op.ins[1])},
          {DNNL_ARG_VARIANCE, ensure_plain(n, op.ins[2])},
          {DNNL_ARG_SCALE, ensure_plain(n, op.ins[3])},
          {DNNL_ARG_SHIFT, ensure_plain(n, op.ins[4])}});
}

void lower_lrn(Net &n, const Op &op) {
    if (op.ins.size() != 1 || op.ip.size() != 1 || op.fp.size() != 3) fail("bad lrn op");
    int a = op.ins[0];
    check_value(n, a, "lrn src");
    const dims_t d = n.values[a].dims;
    if (d.size() < 3 || d.size() > 5 || d != n.values[op.out].dims) fail("lrn: bad shape");
    if (op.ip[0] < 1 || op.ip[0] % 2 == 0) fail("lrn: the size must be odd");
    auto pd = fast_layout(n.values[a].md, channels_last(d), [&](const memory::desc &md) {
        return lrn_forward::primitive_desc(n.eng, prop_kind::forward_inference,
                                           algorithm::lrn_across_channels, md, md, op.ip[0],
                                           op.fp[0], op.fp[1], op.fp[2], plain_attr());
    });
    push_src_dst<lrn_forward>(n, a, op.out, pd);
}

}  // namespace
