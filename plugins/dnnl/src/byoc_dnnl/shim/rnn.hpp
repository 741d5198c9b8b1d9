// The rnn family's C++ half (byoc_dnnl/kinds/rnn.py): rnn (LSTM and GRU).
#pragma once

#include "net.hpp"

namespace {

// LSTM and GRU: one oneDNN RNN primitive per direction, reading [T, N, C] and writing its
// direction's [T, N, H] slice of the [T, directions, N, H] output in place. Weights come as
// [directions, inputs, gates, H] and biases as [directions, gates, H] in oneDNN's gate order
// (lowering.py's _rnn); states as [directions, N, H] (absent: zeros).
// The two directions of a bidirectional layer run at once, one OpenMP thread each (a `paired`
// step): a step of one sequence is a matrix-vector product, too small to split between
// threads (599 steps of 100 units, AMD EPYC Zen 4: 4.3 ms in one bidirectional primitive, 2.5
// ms as a pair, onnxruntime 3.1 ms).
void lower_rnn(Net &n, const Op &op) {
    if (op.ins.size() != 6 || op.ip.size() != 2) fail("bad rnn op");
    const int64_t cell = op.ip[0], direction = op.ip[1];
    if (cell < 1 || cell >= CELL_END || direction < 1 || direction >= DIR_END)
        fail("rnn: bad cell or direction");
    for (int i = 0; i < 4; ++i) check_value(n, op.ins[i], "rnn operand");
    for (int i = 1; i < 4; ++i)
        if (n.values[root(n, op.ins[i])].kind != CONST) fail("rnn: weights must be constant");
    const int x = ensure_plain(n, op.ins[0]);
    const dims_t xd = n.values[x].dims, yd = n.values[op.out].dims;
    const int64_t D = direction == DIR_BIDIRECTIONAL ? 2 : 1;
    const int64_t G = cell == CELL_LSTM ? 4 : 3, GB = cell == CELL_GRU ? 3 : 4;
    if (xd.size() != 3 || yd.size() != 4) fail("rnn: bad ranks");
    const int64_t T = xd[0], N = xd[1], C = xd[2], H = yd[3];
    if (yd != dims_t{T, D, N, H}) fail("rnn: the output must be [T, directions, N, H]");
    if (n.values[op.ins[1]].dims != dims_t{D, C, G, H} ||
        n.values[op.ins[2]].dims != dims_t{D, H, G, H} || n.values[op.ins[3]].dims != dims_t{D, GB, H})
        fail("rnn: bad weight or bias shapes");
    if (cell != CELL_LSTM && op.ins[5] >= 0) fail("rnn: only an LSTM has a cell state");
    for (int i : {4, 5})
        if (op.ins[i] >= 0) {
            check_value(n, op.ins[i], "rnn state");
            if (n.values[op.ins[i]].dims != dims_t{D, N, H}) fail("rnn: states must be [D, N, H]");
        }
    set_out(n, op.out, plain(yd));
    int plain_in[6];  // reordered before the pair: no step may come between its two
    for (int i = 0; i < 6; ++i) plain_in[i] = op.ins[i] < 0 ? -1 : ensure_plain(n, op.ins[i]);
    const bool pair = D == 2 && omp_get_max_threads() > 1;
    OneThread one(pair);  // then each direction's primitive is made for one thread
    size_t first_scratch = 0;
    for (int64_t d = 0; d < D; ++d) {
        // Direction d's part of a [D, ...] tensor: a view of its plain layout.
        auto part = [&](int i, const dims_t &dims) {
            if (plain_in[i] < 0) return -1;
            int w = view_of(n, plain_in[i], plain(dims));
            n.values[w].skip = (size_t)d * plain(dims).get_size();
            return w;
        };
        const int wl = part(1, {1, 1, C, G, H}), wi = part(2, {1, 1, H, G, H});
        const int b = part(3, {1, 1, GB, H});
        int h0 = part(4, {1, 1, N, H}), c0 = part(5, {1, 1, N, H});
        if (cell == CELL_LSTM && (h0 < 0) != (c0 < 0))  // oneDNN takes both or neither
            (h0 < 0 ? h0 : c0) = zeros(n, plain({1, 1, N, H}));
        const int y = view_of(n, op.out, memory::desc({T, N, H}, dt::f32, dims_t{D * N * H, H, 1}));
        n.values[y].skip = (size_t)(d * N * H) * sizeof(float);
        const bool reverse = direction == DIR_REVERSE || d == 1;
        const auto dir = reverse ? rnn_direction::unidirectional_right2left
                                 : rnn_direction::unidirectional_left2right;
        const auto kind = prop_kind::forward_inference;
        const memory::desc none, src = n.values[x].md, bias = n.values[b].md;
        const memory::desc h0md = h0 < 0 ? none : n.values[h0].md, dst = n.values[y].md;
        const memory::desc c0md = c0 < 0 ? none : n.values[c0].md;
        const memory::desc wlmd = any({1, 1, C, G, H}), wimd = any({1, 1, H, G, H});
        rnn_primitive_desc_base pd;
        primitive prim;
        if (cell == CELL_LSTM) {
            auto p = lstm_forward::primitive_desc(n.eng, kind, dir, src, h0md, c0md, wlmd, wimd,
                                                  bias, dst, none, none, plain_attr());
            pd = p;
            prim = lstm_forward(p);
        } else if (cell == CELL_GRU) {
            auto p = gru_forward::primitive_desc(n.eng, kind, dir, src, h0md, wlmd, wimd, bias,
                                                 dst, none, plain_attr());
            pd = p;
            prim = gru_forward(p);
        } else {
            auto p = lbr_gru_forward::primitive_desc(n.eng, kind, dir, src, h0md, wlmd, wimd,
                                                     bias, dst, none, plain_attr());
            pd = p;
            prim = lbr_gru_forward(p);
        }
        std::vector<std::pair<int, int>> args = {
            {DNNL_ARG_SRC_LAYER, x},
            {DNNL_ARG_WEIGHTS_LAYER, ensure_md(n, wl, pd.weights_layer_desc())},
            {DNNL_ARG_WEIGHTS_ITER, ensure_md(n, wi, pd.weights_iter_desc())},
            {DNNL_ARG_BIAS, b},
            {DNNL_ARG_DST_LAYER, y}};
        if (h0 >= 0) args.push_back({DNNL_ARG_SRC_ITER, h0});
        if (c0 >= 0) args.push_back({DNNL_ARG_SRC_ITER_C, c0});
        push(n, prim, args);
        Step &s = n.steps.back();
        s.threads = omp_get_max_threads();
        s.paired = pair && d == 0;
        if (pair && d == 1) s.scratch_skip = (first_scratch + 63) / 64 * 64;
        first_scratch = pd.scratchpad_desc().get_size();
        n.scratch_size = std::max(n.scratch_size, s.scratch_skip + first_scratch);
    }
}

}  // namespace
