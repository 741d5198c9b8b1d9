// The resample family's C++ half (byoc_dnnl/kinds/resample.py): resample.
#pragma once

#include "net.hpp"

namespace {

void lower_resample(Net &n, const Op &op) {
    if (op.ins.size() != 1 || op.ip.size() != 1) fail("bad resample op");
    int a = op.ins[0];
    check_value(n, a, "resample src");
    const dims_t &sd = n.values[a].dims, &dd = n.values[op.out].dims;
    if (sd.size() < 3 || sd.size() > 5 || dd.size() != sd.size() || sd[0] != dd[0] ||
        sd[1] != dd[1])
        fail("resample: bad shape");
    algorithm alg = by_id(RESAMPLE_ALGS, op.ip[0], "resampling");
    const memory::desc &md = n.values[a].md;
    auto pd = fast_layout(md, channels_last(sd), [&](const memory::desc &src) {
        return resampling_forward::primitive_desc(n.eng, prop_kind::forward_inference, alg, src,
                                                  any(dd), plain_attr());
    });
    push_src_dst<resampling_forward>(n, a, op.out, pd);
}

}  // namespace
