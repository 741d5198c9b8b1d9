// The shape family's C++ half (byoc_dnnl/kinds/shape.py): concat, view, transpose, slice and
// shuffle.
#pragma once

#include "net.hpp"

namespace {

void lower_concat(Net &n, const Op &op) {
    if (op.ins.empty() || op.ip.size() != 1) fail("bad concat op");
    int64_t axis = op.ip[0];
    const dims_t od = n.values[op.out].dims;
    if (axis < 0 || axis >= (int64_t)od.size()) fail("concat: bad axis");
    for (int v : op.ins) check_value(n, v, "concat operand");
    const dt t = n.values[op.ins[0]].md.get_data_type();  // float32, or u8 or s8 (all alike)
    for (int v : op.ins)
        if (n.values[v].md.get_data_type() != t) fail("concat: operands of different types");
    for (int attempt = 0; attempt < 2; ++attempt) {
        std::vector<int> ins;
        std::vector<memory::desc> mds;
        for (int v : op.ins) {
            int s = attempt == 0 ? v : ensure_md(n, v, retyped(n, plain(n.values[v].dims), t));
            ins.push_back(s);
            mds.push_back(n.values[s].md);
        }
        concat::primitive_desc pd;
        try {
            memory::desc dst = attempt == 0 ? memory::desc(od, t, tag::any) : retyped(n, plain(od), t);
            pd = concat::primitive_desc(n.eng, dst, (int)axis, mds, plain_attr());
        } catch (const dnnl::error &) {
            if (attempt == 0) continue;
            throw;
        }
        std::vector<std::pair<int, int>> args;
        for (size_t i = 0; i < ins.size(); ++i) args.push_back({DNNL_ARG_MULTIPLE_SRC + (int)i, ins[i]});
        set_out(n, op.out, pd.dst_desc());
        args.push_back({DNNL_ARG_DST, op.out});
        n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
        push(n, concat(pd), args);
        return;
    }
}

void lower_view(Net &n, const Op &op) {
    if (op.ins.size() != 1) fail("bad view op");
    check_value(n, op.ins[0], "view src");
    int a = ensure_plain(n, op.ins[0]);
    const dims_t d = n.values[op.out].dims;
    int64_t c1 = 1, c2 = 1;
    for (auto x : n.values[a].dims) c1 *= x;
    for (auto x : d) c2 *= x;
    if (c1 != c2) fail("view: element counts differ");
    set_out(n, op.out, plain(d));
    n.values[op.out].alias_of = a;
}

// Value a read through `view` (a strided or offset description of its storage) and reordered
// into `out`, laid out as `md` and written through `through` (another description of md's
// bytes; md itself by default): one jit reorder.
void copy_view(Net &n, int a, const memory::desc &view, int out, const memory::desc &md,
               const memory::desc *through = nullptr) {
    int v = view_of(n, a, view);
    set_out(n, out, md);
    const int to = through ? view_of(n, out, *through) : out;
    push(n, reorder(reorder::primitive_desc(n.eng, view, n.eng, n.values[to].md)),
         {{DNNL_ARG_FROM, v}, {DNNL_ARG_TO, to}});
}

// Dense float32 of dims d, with md's order of dims when md has no inner blocks (a window of an
// NWC tensor stays NWC, so the convolution after it needs no reorder), else plain.
memory::desc dense_like(const memory::desc &md, const dims_t &d) {
    if (md.get_format_kind() != memory::format_kind::blocked || md.get_inner_nblks() != 0 ||
        md.get_ndims() != (int)d.size())
        return memory::desc(d, md.get_data_type(), plain(d).get_strides());
    const dims_t st = md.get_strides();
    std::vector<size_t> order(d.size());  // outermost first
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return st[x] > st[y]; });
    dims_t strides(d.size());
    int64_t s = 1;
    for (size_t k = order.size(); k-- > 0;) {
        strides[order[k]] = s;
        s *= d[order[k]];
    }
    return memory::desc(d, md.get_data_type(), strides);
}

// out[j...] = in[perm...]: a strided view of the input in the output's order, reordered into a
// dense output (one jit reorder). A dense source (no inner blocks, any order of dims: a
// convolution's channels-last output) is viewed with its own strides permuted, a blocked one
// reordered to plain first; when the view is the plain output (NHWC transposed to N,H,W,C), the
// output is the view itself, with no copy.
void lower_transpose(Net &n, const Op &op) {
    if (op.ins.size() != 1) fail("bad transpose op");
    check_value(n, op.ins[0], "transpose src");
    int a = op.ins[0];
    const dims_t out = n.values[op.out].dims;
    if (!same_bytes(n.values[a].md, dense_like(n.values[a].md, n.values[a].dims)))
        a = ensure_plain(n, a);
    const memory::desc view = permuted(n.values[a].dims, op.ip, n.values[a].md.get_strides());
    if (view.get_dims() != out) fail("transpose: perm does not give the output's shape");
    if (same_bytes(view, plain(out))) {
        set_out(n, op.out, plain(out));
        n.values[op.out].alias_of = a;
        return;
    }
    copy_view(n, a, view, op.out, plain(out));
}

// Whether the window `out` of a row-major tensor of dims `in` is one run of its bytes: the dims
// before its outermost cut are one long, and those after it whole.
bool one_run(const dims_t &in, const dims_t &out) {
    size_t cut = 0;
    while (cut < in.size() && out[cut] == in[cut]) ++cut;
    for (size_t i = 0; i < cut && cut < in.size(); ++i)
        if (in[i] != 1) return false;
    for (size_t i = cut + 1; i < in.size(); ++i)
        if (out[i] != in[i]) return false;
    return true;
}

// Slice: a window of the source (a sub-memory view; with steps, stepped_window's) reordered into
// a dense output in the source's order of dims; a window that is one run of a row-major
// source's bytes (a Split of attention's fused q, k and v along their outermost dim) is a view
// of them instead (ViT-tiny, 12 layers: 36 copies, 5% of its time on AVX-512).
void lower_slice(Net &n, const Op &op) {
    if (op.ins.size() != 1) fail("bad slice op");
    int a = op.ins[0];
    check_value(n, a, "slice src");
    const dims_t in = n.values[a].dims, out = n.values[op.out].dims;
    const size_t r = in.size();
    if (op.ip.size() != 2 * r) fail("slice: offsets, steps and ranks differ");
    const dims_t offsets(op.ip.begin(), op.ip.begin() + r), steps(op.ip.begin() + r, op.ip.end());
    check_window(in, out, offsets, steps);
    const dt t = n.values[a].md.get_data_type();  // float32, or a QuantizeLinear's u8 or s8
    if (std::any_of(steps.begin(), steps.end(), [](int64_t s) { return s != 1; })) {
        if (n.values[a].md.get_inner_nblks() != 0) a = ensure_md(n, a, retyped(n, channels_last(in), t));
        const memory::desc md = dense_like(n.values[a].md, out);
        const ViewPair w = stepped_window(n.values[a].md, md, offsets, steps);
        copy_view(n, a, w.src, op.out, md, &w.dst);
        return;
    }
    const memory::desc whole(in, t, plain(in).get_strides());
    if (n.values[a].md == whole && one_run(in, out)) {  // a view of those bytes, no copy
        size_t skip = 0;
        for (size_t i = 0; i < r; ++i) skip += offsets[i] * whole.get_strides()[i];
        set_out(n, op.out, memory::desc(out, t, plain(out).get_strides()));
        n.values[op.out].alias_of = a;
        n.values[op.out].skip = skip * memory::data_type_size(t);
        return;
    }
    memory::desc view;
    try {
        view = n.values[a].md.submemory_desc(out, offsets);
    } catch (const dnnl::error &) {  // a window that cuts a blocked dim inside a block
        a = ensure_md(n, a, retyped(n, plain(in), t));
        view = n.values[a].md.submemory_desc(out, offsets);
    }
    copy_view(n, a, view, op.out, dense_like(n.values[a].md, out));
}

// Channel shuffle: one reorder between two views of the source's dense layout (channels-last
// stays channels-last, so the convolution after it needs no reorder).
void lower_shuffle(Net &n, const Op &op) {
    if (op.ins.size() != 1 || op.ip.size() != 1) fail("bad shuffle op");
    int a = op.ins[0];
    check_value(n, a, "shuffle src");
    const dims_t d = n.values[a].dims;
    if (n.values[op.out].dims != d) fail("shuffle: src and dst shapes differ");
    if (n.values[a].md.get_inner_nblks() != 0) a = ensure_md(n, a, channels_last(d));
    const memory::desc md = dense_like(n.values[a].md, d);
    const ViewPair w = shuffled(n.values[a].md, md, op.ip[0]);
    copy_view(n, a, w.src, op.out, md, &w.dst);
}

}  // namespace
