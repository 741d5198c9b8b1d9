// What bd_finalize does to the whole net once every op is lowered, in order: convolutions whose
// large output only a pooling reads become banded steps (run_banded), sum post-op copies are dropped where
// the destination can take the operand's storage, bilinear upsamplings into an output become
// resize steps (run_resize), and the arena is planned.
#pragma once

#include "net.hpp"

namespace {

// Band plans (BandPlan): a convolution's output of at least BAND_MIN bytes goes through
// buffers of about BAND_BYTES per thread. AMD EPYC Zen 4, 2 cores: a 1 -> 32 channel 3x3
// convolution over 900x120 and its 2x2 max pool took 1.1-1.3 ms whole once other work had
// evicted the cache (0.55 ms warm), 0.57-0.63 ms in bands of 10 to 90 rows.
const size_t BAND_MIN = 4 << 20, BAND_BYTES = 512 << 10;

// md's format tag among those oneDNN picks for a 4-D activation, or undef.
tag activation_tag(const memory::desc &md) {
    for (tag t : {tag::abcd, tag::acdb, tag::aBcd16b, tag::aBcd8b, tag::aBcd4b})
        if (memory::desc(md.get_dims(), md.get_data_type(), t) == md) return t;
    return tag::undef;
}

// The first `channels` channels and `rows` rows of md: a dense description of the same bytes
// when there is one (oneDNN's fast kernels want dense tensors), else a window of md.
memory::desc window_of(const memory::desc &md, int64_t channels, int64_t rows) {
    dims_t d = md.get_dims();
    d[1] = channels;
    d[2] = rows;
    const memory::desc window = md.submemory_desc(d, dims_t(d.size(), 0));
    const tag t = activation_tag(md);
    if (t == tag::undef) return window;
    const memory::desc dense(d, md.get_data_type(), t);
    dims_t block(d.size(), 1);  // a dim's inner block: its stride is that of whole blocks
    const dims_t blks = dense.get_inner_blks(), idxs = dense.get_inner_idxs();
    for (size_t k = 0; k < blks.size(); ++k) block[idxs[k]] *= blks[k];
    const dims_t a = window.get_strides(), b = dense.get_strides();
    for (size_t i = 0; i < d.size(); ++i)
        if ((d[i] + block[i] - 1) / block[i] != 1 && a[i] != b[i]) return window;
    return dense;
}

// The primitive descriptor of a step's primitive (a copy).
template <class PD>
PD pd_of(const Step &s) {
    const_dnnl_primitive_desc_t c = nullptr;
    dnnl_primitive_desc_t copy = nullptr;
    if (dnnl_primitive_get_primitive_desc(s.prim.get(), &c) != dnnl_success ||
        dnnl_primitive_desc_clone(&copy, c) != dnnl_success)
        fail("cannot read a primitive's descriptor");
    return PD(copy);
}

// A banded step: band b on thread b % threads (whose buffer its arguments name), its
// convolution into that buffer, then its pooling from there; all of them on thread 0 when
// fewer threads run (a nested region).
void run_banded(Net &n, Arena &a, size_t i) {
    const Step &s = n.steps[i];
    const BandPlan &plan = n.bands[s.band];
    auto &args = a.bands[s.band];
    char *src = (char *)a.mems[plan.src].get_data_handle();
    char *dst = (char *)a.mems[plan.dst].get_data_handle();
    std::string error;
#pragma omp parallel num_threads(plan.threads)
    {
        const int t = omp_get_thread_num();
        const bool spread = omp_get_num_threads() == plan.threads;
        const size_t every = spread ? (size_t)plan.threads : 1;
        for (size_t b = spread ? (size_t)t : 0; (spread || t == 0) && b < plan.bands.size();
             b += every) {
            const BandPlan::Band &band = plan.bands[b];
            Arena::BandArgs &band_args = args[b];
            try {
                stream &strm = thread_stream(a, t);
                band_args.conv[DNNL_ARG_SRC].set_data_handle(src + band.src_skip);
                plan.convs[band.conv].execute(strm, band_args.conv);
                for (int k = 0; k < plan.blocks; ++k) {
                    auto &pool = band_args.pools[k];
                    pool[DNNL_ARG_DST].set_data_handle(dst + band.dst_skip + k * plan.dst_block);
                    plan.pools[band.pool].execute(strm, pool);
                }
            } catch (const std::exception &e) {
#pragma omp critical
                error = e.what();
            }
        }
    }
    if (!error.empty()) fail(error);
}

// Steps i (a 2-D convolution) and i + 1 (a pooling of its output alone, windows not
// overlapping along the rows) as one banded step, when the output is large; false otherwise.
bool band_conv_pool(Net &n, size_t i, const std::vector<int> &readers) {
    const Step &c = n.steps[i], &p = n.steps[i + 1];
    if (!c.has_prim || !p.has_prim || c.paired || c.run || p.run ||
        c.prim.get_kind() != primitive::kind::convolution ||
        p.prim.get_kind() != primitive::kind::pooling)
        return false;
    int out = -1, pooled = -1;
    for (auto &a : c.args)
        if (a.first == DNNL_ARG_DST) out = a.second;
    for (auto &a : p.args)
        if (a.first == DNNL_ARG_SRC && a.second != out) return false;
        else if (a.first == DNNL_ARG_DST) pooled = a.second;
    const Value &o = n.values[out];
    if (o.kind != INTERNAL || o.alias_of >= 0 || readers[out] != 1 || o.md.get_size() < BAND_MIN)
        return false;
    auto cpd = pd_of<convolution_forward::primitive_desc>(c);
    auto ppd = pd_of<pooling_forward::primitive_desc>(p);
    const memory::desc src = cpd.src_desc(), dst = cpd.dst_desc(), pdst = ppd.dst_desc();
    const tag buf_tag = activation_tag(dst);
    const dims_t sd = src.get_dims(), od = dst.get_dims(), pk = ppd.get_kernel();
    auto rows_blocked = [](const memory::desc &md) {
        for (auto i : md.get_inner_idxs())
            if (i == 2) return true;
        return false;
    };
    if (sd.size() != 4 || buf_tag == tag::undef || src.get_data_type() != dt::f32 ||
        dst.get_data_type() != dt::f32 || cpd.get_strides()[0] != 1 ||
        pk[0] != ppd.get_strides()[0] || ppd.get_padding_l()[0] || ppd.get_padding_r()[0] ||
        ppd.get_dilations()[0] || od[2] % pk[0] || rows_blocked(src) || rows_blocked(pdst))
        return false;
    const primitive_attr attr = cpd.get_primitive_attr();
    const post_ops po = attr.get_post_ops();
    for (int k = 0; k < po.len(); ++k) {
        if (po.kind(k) == primitive::kind::eltwise) continue;
        if (po.kind(k) != primitive::kind::binary) return false;
        algorithm alg;
        memory::desc md;
        po.get_params_binary(k, alg, md);
        if (md.get_dims()[2] != 1) return false;  // an operand of the whole output
    }
    BandPlan plan;
    for (auto &a : c.args) {
        if (a.first == DNNL_ARG_SRC) plan.src = a.second;
        else if (a.first != DNNL_ARG_DST) {
            if (n.values[root(n, a.second)].kind != CONST) return false;
            plan.operands.push_back(a);
        }
    }
    plan.dst = pooled;
    const int64_t H = od[2];
    const dims_t wd = cpd.weights_desc().get_dims();
    const int64_t taps = wd[wd.size() - 2], dil = cpd.get_dilations()[0], top = cpd.get_padding_l()[0];
    const int64_t row = (int64_t)(dst.get_size() / H), step = pk[0];
    const int64_t rows = std::max<int64_t>(step, (int64_t)BAND_BYTES / row / step * step);
    if (rows >= H) return false;
    const size_t src_row = (size_t)src.get_strides()[2] * sizeof(float);
    const size_t dst_row = (size_t)pdst.get_strides()[2] * sizeof(float);
    // Channel blocks of a blocked layout are pooled one by one: a band of rows of one block is a
    // dense window of the output, of all blocks it is not (oneDNN's pooling wants it dense).
    const int64_t block = buf_tag == tag::aBcd16b ? 16
                          : buf_tag == tag::aBcd8b ? 8
                          : buf_tag == tag::aBcd4b ? 4
                                                   : od[1];
    if (od[1] % block || (block != od[1] && activation_tag(pdst) != buf_tag)) return false;
    plan.blocks = (int)(od[1] / block);
    plan.dst_block = (size_t)pdst.get_strides()[1] * sizeof(float);
    OneThread one(true);
    std::vector<std::array<int64_t, 3>> conv_keys;  // rows, top and bottom padding
    std::vector<int64_t> pool_keys;                 // rows
    size_t scratch = 0;
    for (int64_t r0 = 0; r0 < H; r0 += rows) {
        const int64_t r = std::min(rows, H - r0);
        const int64_t lo = r0 - top, hi = r0 + r - 1 - top + (taps - 1) * (dil + 1) + 1;
        const int64_t pt = std::max<int64_t>(0, -lo), pb = std::max<int64_t>(0, hi - sd[2]);
        const int64_t first = std::max<int64_t>(lo, 0), last = std::min(hi, sd[2]);
        BandPlan::Band b;
        b.src = window_of(src, sd[1], last - first);
        b.buf = memory::desc({od[0], od[1], r, od[3]}, dt::f32, buf_tag);
        b.pooled = memory::desc({od[0], block, r, od[3]}, dt::f32, buf_tag);
        b.src_skip = (size_t)first * src_row;
        b.dst_skip = (size_t)(r0 / step) * dst_row;
        const std::array<int64_t, 3> key = {r, pt, pb};
        auto at = std::find(conv_keys.begin(), conv_keys.end(), key);
        b.conv = (int)(at - conv_keys.begin());
        if (at == conv_keys.end()) {
            dims_t pl = cpd.get_padding_l(), pr = cpd.get_padding_r();
            pl[0] = pt;
            pr[0] = pb;
            auto bpd = convolution_forward::primitive_desc(
                n.eng, prop_kind::forward_inference, cpd.get_algorithm(), b.src,
                cpd.weights_desc(), cpd.bias_desc(), b.buf, cpd.get_strides(),
                cpd.get_dilations(), pl, pr, attr);
            if (bpd.src_desc() != b.src || bpd.dst_desc() != b.buf ||
                std::string(bpd.impl_info_str()) != cpd.impl_info_str())
                return false;  // another kernel than the whole convolution's
            scratch = std::max(scratch, bpd.scratchpad_desc().get_size());
            conv_keys.push_back(key);
            plan.convs.push_back(convolution_forward(bpd));
        }
        auto pat = std::find(pool_keys.begin(), pool_keys.end(), r);
        b.pool = (int)(pat - pool_keys.begin());
        if (pat == pool_keys.end()) {
            auto bpd = pooling_forward::primitive_desc(
                n.eng, prop_kind::forward_inference, ppd.get_algorithm(), b.pooled,
                window_of(pdst, block, r / step),
                ppd.get_strides(), ppd.get_kernel(), ppd.get_dilations(), ppd.get_padding_l(),
                ppd.get_padding_r(), plain_attr());
            if (std::string(bpd.impl_info_str()) != ppd.impl_info_str()) return false;
            scratch = std::max(scratch, bpd.scratchpad_desc().get_size());
            pool_keys.push_back(r);
            plan.pools.push_back(pooling_forward(bpd));
            plan.pool_dsts.push_back(bpd.dst_desc());
        }
        plan.buf_bytes = std::max(plan.buf_bytes, (b.buf.get_size() + 63) / 64 * 64);
        plan.bands.push_back(b);
    }
    plan.region = plan.buf_bytes + (scratch + 63) / 64 * 64;
    plan.threads = n.threads > 0 ? n.threads : omp_get_max_threads();
    n.scratch_size = std::max(n.scratch_size, plan.region * plan.threads);
    Step s;
    s.run = run_banded;
    s.band = (int)n.bands.size();
    s.a = plan.src;
    s.b = plan.dst;
    s.op = c.op;
    s.threads = plan.threads;
    n.bands.push_back(std::move(plan));
    n.steps[i] = s;
    n.steps.erase(n.steps.begin() + (long)i + 1);
    return true;
}

// Every convolution whose large output only a pooling reads becomes a banded step.
void band_conv_pools(Net &n) {
    std::vector<int> readers(n.values.size(), 0);  // steps reading each root, outputs count too
    for (auto &s : n.steps) {
        for (auto &a : s.args)
            if (a.first != DNNL_ARG_DST && a.first != DNNL_ARG_TO) readers[root(n, a.second)]++;
        for (int v : {s.a, s.b, s.c, s.d})
            if (s.run && v >= 0) readers[root(n, v)]++;
    }
    for (int v : n.outputs) readers[root(n, v)] += 2;
    for (size_t v = 0; v < n.values.size(); ++v)
        if (n.values[v].alias_of >= 0) readers[root(n, (int)v)] += 2;  // read through a view
    for (size_t i = 0; i + 1 < n.steps.size(); ++i) {
        try {
            band_conv_pool(n, i, readers);
        } catch (const dnnl::error &) {  // oneDNN has no kernel for a band: the steps stay
        }
    }
}

// Calls use(root, lo, hi) for the root of each value a step reads or writes, where [lo, hi] is
// the step, or its pair: the two steps of a pair run at once, so what either touches lives
// through both.
template <class F>
void each_use(const Net &n, F use) {
    for (size_t i = 0; i < n.steps.size(); ++i) {
        const Step &s = n.steps[i];
        const int lo = (int)i - (i > 0 && n.steps[i - 1].paired), hi = (int)i + s.paired;
        for (auto &p : s.args) use(root(n, p.second), lo, hi);
        if (s.run)
            for (int v : {s.a, s.b, s.c, s.d})
                if (v >= 0) use(root(n, v), lo, hi);
    }
}

// A sum post-op's operand copied into a destination that the copy creates, when nothing reads
// the operand after the copy (a residual block's input: the convolution's own source is
// another value), is not copied: the destination becomes the operand's storage, and the
// convolution adds into it in place.
void drop_sum_copies(Net &n) {
    std::vector<int> first(n.values.size(), -1), last(n.values.size(), -1);
    for (int v : n.outputs) last[root(n, v)] = (int)n.steps.size();
    each_use(n, [&](int r, int lo, int hi) {
        if (first[r] < 0) first[r] = lo;
        last[r] = std::max(last[r], hi);
    });
    std::vector<bool> drop(n.steps.size(), false);
    for (size_t i = 0; i < n.steps.size(); ++i) {
        const Step &s = n.steps[i];
        if (!s.sum_copy) continue;
        const int from = root(n, s.args[0].second), to = s.args[1].second;
        Value &a = n.values[from], &b = n.values[to];
        if (a.kind != INTERNAL || b.kind != INTERNAL || b.alias_of >= 0 ||
            skipped(n, s.args[0].second) || a.md != b.md || last[from] != (int)i ||
            first[to] != (int)i || last[to] == (int)n.steps.size())
            continue;
        b.alias_of = from;
        b.skip = 0;
        last[from] = last[to];
        drop[i] = true;
    }
    std::vector<Step> kept;
    for (size_t i = 0; i < n.steps.size(); ++i)
        if (!drop[i]) kept.push_back(std::move(n.steps[i]));
    n.steps = std::move(kept);
}

// A resize step: resize.hpp's upsampling of the source (a) into the output (b), through the
// plane buffer c.
void run_resize(Net &n, Arena &a, size_t i) {
    const Step &s = n.steps[i];
    byoc_resize::run(n.resizes[s.resize], (const float *)a.mems[s.a].get_data_handle(),
                     (float *)a.mems[s.c].get_data_handle(), (float *)a.mems[s.b].get_data_handle());
}

// A bilinear 2-D upsampling that writes an output of the partition in a layout other than
// plain NCHW (oneDNN's resampling writes its source's layout, and the output is then reordered)
// becomes a resize step (resize.hpp) that writes the caller's array directly, on AVX-512, from
// a channels-last or nChw16c source, when the plan fits (an upsampling). 21 channels from 64x64
// to 512x512, Sapphire Rapids, 2 threads: 1.8 ms (nhwc) or 3.3 (nChw16c) for oneDNN's
// resampling and reorder, 0.75 ms here.
void resize_outputs(Net &n) {
    if (!__builtin_cpu_supports("avx512f")) return;
    std::vector<int> uses(n.values.size(), 0);  // steps reading or writing each root
    each_use(n, [&](int r, int, int) { uses[r]++; });
    for (size_t v = 0; v < n.values.size(); ++v)
        if (n.values[v].alias_of >= 0) uses[root(n, (int)v)] += 2;  // a view of it exists
    for (Step &s : n.steps) {
        if (!s.has_prim || s.paired || s.prim.get_kind() != primitive::kind::resampling) continue;
        auto pd = pd_of<resampling_forward::primitive_desc>(s);
        const memory::desc src = pd.src_desc(), dst = pd.dst_desc();
        int in = -1, out = -1;
        for (auto &a : s.args)
            if (a.first == DNNL_ARG_SRC) in = a.second;
            else if (a.first == DNNL_ARG_DST) out = a.second;
        const tag t = activation_tag(src);
        Value &o = n.values[out];
        if (pd.get_algorithm() != algorithm::resampling_linear || src.get_ndims() != 4 ||
            (t != tag::acdb && t != tag::aBcd16b) || src.get_data_type() != dt::f32 ||
            std::count(n.outputs.begin(), n.outputs.end(), out) != 1 || o.alias_of >= 0 ||
            o.kind != INTERNAL || uses[out] != 1 || dst == plain(o.dims))
            continue;
        const dims_t sd = src.get_dims(), od = dst.get_dims();
        byoc_resize::Plan plan;
        plan.N = sd[0], plan.C = sd[1], plan.IH = sd[2], plan.IW = sd[3];
        plan.OH = od[2], plan.OW = od[3], plan.blocked = t == tag::aBcd16b;
        if (!byoc_resize::make_plan(plan)) continue;
        const dims_t pdims = {plan.C * plan.IH, plan.row()};
        Step r;
        r.run = run_resize;
        r.a = in;
        r.b = out;
        r.c = new_value(n, pdims, plain(pdims));  // invalidates `o`
        r.resize = (int)n.resizes.size();
        r.op = s.op;
        r.threads = s.threads;
        n.values[out].md = plain(n.values[out].dims);
        n.resizes.push_back(std::move(plan));
        s = r;
    }
}

void plan_arena(Net &n) {
    // Outputs: a plain root value writes straight into the caller's array; anything else is
    // reordered into it at the end.
    for (size_t k = 0; k < n.outputs.size(); ++k) {
        int v = n.outputs[k];
        Value &val = n.values[v];
        if (val.kind == INTERNAL && val.alias_of < 0 && val.md == plain(val.dims)) {
            val.kind = OUTPUT;
            val.io_index = (int)k;
            continue;
        }
        const dims_t dims = val.dims;
        const memory::desc md = val.md;
        int u = new_value(n, dims, plain(dims));  // invalidates `val`
        n.values[u].kind = OUTPUT;
        n.values[u].io_index = (int)k;
        Step s;
        s.prim = reorder(reorder::primitive_desc(n.eng, md, n.eng, plain(dims)));
        s.has_prim = true;
        s.args = {{DNNL_ARG_FROM, v}, {DNNL_ARG_TO, u}};
        s.threads = omp_get_max_threads();
        n.steps.push_back(s);
    }
    each_use(n, [&](int v, int lo, int hi) {
        Value &r = n.values[v];
        if (r.first < 0) r.first = lo;
        r.last = std::max(r.last, hi);
    });
    // A softmax or eltwise whose source dies at it writes over that source, as oneDNN allows:
    // the lines it writes are the ones it has just read, in its own core's cache, rather than
    // lines another kernel last wrote from another core (P5's softmaxes: 3.5% of the model).
    std::vector<int> over(n.values.size(), -1);  // a value written over: its storage's root
    for (size_t i = 0; i < n.steps.size(); ++i) {
        const Step &s = n.steps[i];
        if (!s.has_prim || (s.prim.get_kind() != primitive::kind::softmax &&
                            s.prim.get_kind() != primitive::kind::eltwise))
            continue;
        int src = -1, dst = -1;
        for (auto &p : s.args) {
            if (p.first == DNNL_ARG_SRC) src = p.second;
            if (p.first == DNNL_ARG_DST) dst = p.second;
        }
        if (src < 0 || dst < 0) continue;
        const Value &a = n.values[src], &b = n.values[dst];
        if (a.kind != INTERNAL || b.kind != INTERNAL || a.alias_of >= 0 || b.alias_of >= 0 ||
            a.md != b.md || a.last != (int)i || b.first != (int)i)
            continue;
        int r = over[src] >= 0 ? over[src] : src;
        over[dst] = r;
        n.values[r].last = b.last;
    }
    struct Block {
        size_t off, size;
        int first, last;
    };
    std::vector<int> order;
    for (size_t v = 0; v < n.values.size(); ++v)
        if (n.values[v].kind == INTERNAL && n.values[v].alias_of < 0 &&
            n.values[v].first >= 0 && over[v] < 0)
            order.push_back((int)v);
    auto size_of = [&](int v) { return (n.values[v].md.get_size() + 63) / 64 * 64; };
    std::sort(order.begin(), order.end(), [&](int x, int y) { return size_of(x) > size_of(y); });
    std::vector<Block> placed;
    size_t total = 0;
    for (int v : order) {
        Value &val = n.values[v];
        size_t size = size_of(v), off = 0;
        std::vector<Block> clash;
        for (auto &b : placed)
            if (!(b.last < val.first || val.last < b.first)) clash.push_back(b);
        std::sort(clash.begin(), clash.end(), [](auto &x, auto &y) { return x.off < y.off; });
        for (auto &b : clash) {
            if (off + size <= b.off) break;
            off = std::max(off, b.off + b.size);
        }
        val.offset = off;
        placed.push_back({off, size, val.first, val.last});
        total = std::max(total, off + size);
    }
    n.arena_size = total;
    for (size_t v = 0; v < n.values.size(); ++v)
        if (over[v] >= 0) n.values[v].offset = n.values[over[v]].offset;
}

}  // namespace
