// The pool family's C++ half (byoc_dnnl/kinds/pool.py): pool and reduce.
#pragma once

#include "net.hpp"

namespace {

void lower_pool(Net &n, const Op &op) {
    if (op.ins.size() != 1 || op.ip.size() < 2) fail("bad pool op");
    int a = op.ins[0];
    check_value(n, a, "pool src");
    const dims_t sd = n.values[a].dims;
    if (sd.size() < 3 || sd.size() > 5) fail("pool src must have 3 to 5 dims");
    size_t k = sd.size() - 2, at = 1;
    algorithm alg = by_id(POOL_ALGS, op.ip[0], "pooling");
    dims_t kernel = take(op.ip, at, k), strides = take(op.ip, at, k), dil = take(op.ip, at, k),
           pl = take(op.ip, at, k), pr = take(op.ip, at, k);
    const memory::desc &md = n.values[a].md;
    auto pd = fast_layout(md, channels_last(sd), [&](const memory::desc &src) {
        return pooling_forward::primitive_desc(n.eng, prop_kind::forward_inference, alg, src,
                                               any(n.values[op.out].dims), strides, kernel, dil,
                                               pl, pr, plain_attr());
    });
    push_src_dst<pooling_forward>(n, a, op.out, pd);
}

// A Reduce over adjacent axes: a pooling over views of its plain source and output
// (layouts.hpp's reduce_as_pool).
void lower_reduce(Net &n, const Op &op) {
    if (op.ins.size() != 1 || op.ip.size() != 1) fail("bad reduce op");
    check_value(n, op.ins[0], "reduce src");
    int a = ensure_plain(n, op.ins[0]);
    const dims_t out = n.values[op.out].dims;
    const Pooled p = reduce_as_pool(n.values[a].dims, out);
    const algorithm alg = by_id(REDUCE_ALGS, op.ip[0], "reduce");
    const bool sum = std::string(REDUCE_ALGS[op.ip[0] - 1].name) == "sum";
    auto pd = reduce_pd(n.eng, alg, sum, p, plain_attr());
    const int src = view_of(n, a, p.src);
    set_out(n, op.out, plain(out));
    const int dst = view_of(n, op.out, p.dst);
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    push(n, pooling_forward(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
}

}  // namespace
