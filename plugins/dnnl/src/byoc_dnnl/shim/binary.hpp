// The binary family's C++ half (byoc_dnnl/kinds/binary.py): binary.
#pragma once

#include "net.hpp"

namespace {

// A binary kernel over a dense first operand whose other operands (the second, post-ops') are
// each one value or dense in the same layout, run over one flat row: the result is the same,
// and oneDNN's jit kernel over channels-last tensors whose channels are not a multiple of its
// vector is slow (88 channels, 3x96 pixels, 13 post-ops: 38 us, against 7 us for 96 channels,
// AVX-512). Returns false (nothing added) when the operands do not fit.
bool lower_flat_binary(Net &n, const Op &op, algorithm alg, dt out_t, std::vector<Post> posts) {
    const int a = op.ins[0], b = op.ins[1];
    const memory::desc amd = n.values[a].md;
    const dims_t od = n.values[op.out].dims;
    int64_t count = 1;
    for (auto x : od) count *= x;
    auto one = [&](int v) {
        for (auto x : n.values[v].dims)
            if (x != 1) return false;
        return true;
    };
    auto dense = [&](const memory::desc &md) {
        return md.get_inner_nblks() == 0 && md.get_padded_dims() == md.get_dims() &&
               md.get_size() == (size_t)count * memory::data_type_size(md.get_data_type());
    };
    auto same = [&](int v) {  // dense in a's layout (any element type)
        return n.values[v].dims == od && retyped(n, n.values[v].md, amd.get_data_type()) == amd;
    };
    if (!dense(amd) || od.size() < 2 || !(one(b) || same(b))) return false;
    for (const Post &p : posts)
        if (p.kind == PO_SUM || (p.kind == PO_BINARY && !one(p.tensor) && !same(p.tensor)))
            return false;
    auto flat_md = [&](int v) {  // v as one row, or one value
        return memory::desc({1, one(v) ? 1 : count}, n.values[v].md.get_data_type(), tag::ab);
    };
    auto flat = [&](int v) {  // a view of v's storage (a single value's plain copy) as flat_md
        const dt t = n.values[v].md.get_data_type();
        return view_of(n, one(v) ? ensure_md(n, v, retyped(n, plain(n.values[v].dims), t)) : v,
                       flat_md(v));
    };
    const dims_t row = {1, count};
    std::vector<dims_t> operand_dims;
    for (const Post &p : posts)
        operand_dims.push_back(p.kind == PO_BINARY ? flat_md(p.tensor).get_dims() : dims_t{});
    const memory::desc fmd(row, dt::f32, tag::ab), dmd(row, out_t, tag::ab);
    primitive_attr attr = make_attr(n, posts, false, &fmd, row, operand_dims);
    binary::primitive_desc pd(n.eng, alg, flat_md(a), flat_md(b), dmd, attr);
    if (is_reference(pd)) return false;
    for (Post &p : posts)
        if (p.kind == PO_BINARY) p.tensor = flat(p.tensor);
    const int sa = flat(a), sb = flat(b);
    set_out(n, op.out, retyped(n, amd, out_t));
    const int dst = view_of(n, op.out, dmd);
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC_0, sa}, {DNNL_ARG_SRC_1, sb}};
    post_args(n, posts, fmd, dst, args);
    args.push_back({DNNL_ARG_DST, dst});
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    push(n, binary(pd), args);
    return true;
}

void lower_binary(Net &n, const Op &op) {
    std::vector<Post> posts;
    auto [ia, fa] = read_posts(n, op, posts);
    (void)fa;
    if (op.ins.size() != 2 || op.ip.size() < ia + 1) fail("binary takes two operands and an alg");
    int a = op.ins[0], b = op.ins[1];
    check_value(n, a, "binary a");
    check_value(n, b, "binary b");
    const dims_t od = n.values[op.out].dims;
    if (n.values[a].dims != od) fail("binary: the first operand must have the output's shape");
    if (n.values[b].dims.size() != od.size()) fail("binary: operands must have the same rank");
    algorithm alg = binary_alg(op.ip[ia]);
    // A u8 or s8 destination (a QuantizeLinear) or operand (a DequantizeLinear reads one).
    const dt out_t = op.ip.size() > ia + 1 ? dst_type(op.ip[ia + 1]) : dt::f32;
    const bool full = n.values[b].dims == od;
    const dt bt = n.values[b].md.get_data_type();
    if (bt != dt::f32 && !full) fail("binary: an int8 second operand must have the output's shape");
    if (lower_flat_binary(n, op, alg, out_t, posts)) return;
    // Try the first operand's layout (blocked stays blocked); fall back to plain. A u8 or s8
    // first operand is then converted to float32 first: oneDNN 3.2's jit kernel writes one
    // only to a u8 or s8 destination (a DequantizeLinear's float32 ran its reference kernel).
    const dt at = n.values[a].md.get_data_type();
    const int attempts = at == dt::f32 ? 2 : 3;
    for (int attempt = 0; attempt < attempts; ++attempt) {
        int sa = attempt == 0   ? a
                 : attempt == 1 ? ensure_md(n, a, retyped(n, plain(od), at))
                                : ensure_md(n, a, retyped(n, n.values[a].md, dt::f32));
        memory::desc md = n.values[sa].md, fmd = retyped(n, md, dt::f32);
        memory::desc bmd = full ? retyped(n, md, bt) : plain(n.values[b].dims);
        primitive_attr attr = make_attr(n, posts, false, &fmd, od);
        binary::primitive_desc pd;
        try {
            pd = binary::primitive_desc(n.eng, alg, md, bmd, retyped(n, md, out_t), attr);
        } catch (const dnnl::error &) {
            if (attempt + 1 < attempts) continue;
            throw;
        }
        // oneDNN's reference kernel for some blocked layouts is ~50x slower than plain jit.
        if (attempt + 1 < attempts && is_reference(pd)) continue;
        int sb = full ? ensure_md(n, b, bmd) : ensure_plain(n, b);
        std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC_0, sa}, {DNNL_ARG_SRC_1, sb}};
        set_out(n, op.out, pd.dst_desc());
        post_args(n, posts, fmd, op.out, args);
        args.push_back({DNNL_ARG_DST, op.out});
        n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
        push(n, binary(pd), args);
        return;
    }
}

}  // namespace
