// byoc-dnnl native runtime: a whole partition as one oneDNN "net", run in one C call.
//
// Only this file sees oneDNN's enums and types (compiled against the installed dnnl.hpp); Python
// talks to it through the small extern "C" API at the bottom, declared again in native.py.
//
// A net is built op by op (tensors are ids, ops reference them), then finalized: primitives
// are created once with format_tag::any where oneDNN may pick its blocked layouts, constant
// weights are reordered once, reorders are inserted only where a consumer wants another
// layout, and an arena plan (buffer reuse by lifetime + one shared user scratchpad) is computed.
// A run borrows an arena from a pool (or makes one), so concurrent runs never share buffers.

#include <oneapi/dnnl/dnnl.hpp>
#include <oneapi/dnnl/dnnl_debug.h>
#include "layouts.hpp"
#include "resize.hpp"
#include "winograd.hpp"
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

using namespace dnnl;
using dims_t = memory::dims;
using tag = memory::format_tag;
using dt = memory::data_type;

namespace {

using byoc_dnnl::any;
using byoc_dnnl::append_eltwise;
using byoc_dnnl::eltwise_width;
using byoc_dnnl::by_id;
using byoc_dnnl::channels_last;
using byoc_dnnl::check_window;
using byoc_dnnl::fast_layout;
using byoc_dnnl::innermost;
using byoc_dnnl::inverse;
using byoc_dnnl::is_gemm;
using byoc_dnnl::is_reference;
using byoc_dnnl::permuted;
using byoc_dnnl::plain;
using byoc_dnnl::Pooled;
using byoc_dnnl::reduce_as_pool;
using byoc_dnnl::reduce_pd;
using byoc_dnnl::shuffled;
using byoc_dnnl::stepped_window;
using byoc_dnnl::tanh_as_binary;
using byoc_dnnl::ViewPair;
using namespace byoc_ops;  // OP_*, PO_*, the algorithm tables (ops.py, generated)

enum Kind { INTERNAL = 0, INPUT = 1, OUTPUT = 2, CONST = 3 };
const int QPARAMS = OP_END;  // a custom step (no op kind): quantize_dynamic's parameters
const int QBIAS = OP_END + 1;  // a custom step: a bias older onnxruntimes quantized (run_qbias)
const int BANDED = OP_END + 2;  // a custom step: a convolution and its pooling, band by band
const int WINOGRAD = OP_END + 3;  // a custom step: a 3-tap or 3x3 convolution as Winograd
const int RESIZE = OP_END + 4;  // a custom step: a bilinear upsampling into an output (resize.hpp)

struct Value {
    dims_t dims;
    memory::desc md;
    bool has_md = false;
    int kind = INTERNAL;
    int io_index = -1;
    int alias_of = -1;      // views share their root's storage
    size_t skip = 0;        // a view's first byte in its alias_of's storage (a window)
    bool defined = false;   // written by an input, a constant or an earlier op
    std::shared_ptr<char> data;  // constants: owned, aligned storage
    size_t offset = 0;      // internal roots: offset in the arena
    int first = -1, last = -1;
};

struct Step {
    primitive prim;
    std::vector<std::pair<int, int>> args;  // (DNNL_ARG_*, value id)
    bool has_prim = false;
    int custom = 0;  // OP_ERF, OP_LUT, OP_SAFE_SOFTMAX, QPARAMS, QBIAS, BANDED, WINOGRAD, RESIZE
    int a = -1, b = -1, c = -1, d = -1;
    int op = -1;     // the op (bd_op call) this step belongs to; -1: an output reorder
    int threads = 0; // the OpenMP threads its primitive was made for
    int band = -1;           // BANDED: its plan in Net::bands
    int wino = -1;           // WINOGRAD: its plan in Net::winos (prim: its matmul)
    int resize = -1;         // RESIZE: its plan in Net::resizes (a: source, b: output, c: plane)
    bool paired = false;     // runs at once with the next step, one OpenMP thread each
    bool sum_copy = false;   // copies a sum post-op's operand into its destination
    size_t scratch_skip = 0; // where its scratchpad starts in the shared one (a pair's second)
};

struct Op {
    int kind;
    std::vector<int> ins;
    int out;
    std::vector<int64_t> ip;
    std::vector<float> fp;
};

struct Arena {
    char *buf = nullptr;
    std::vector<memory> mems;
    std::vector<std::unordered_map<int, memory>> args;
    stream strm;
    std::vector<stream> side;  // threads 1, 2, ... of a pair or a banded step: one stream each
    // BANDED steps: per plan, per band, the convolution's arguments and each block's pool's
    struct BandArgs {
        std::unordered_map<int, memory> conv;
        std::vector<std::unordered_map<int, memory>> pools;
    };
    std::vector<std::vector<BandArgs>> bands;
    ~Arena() { std::free(buf); }
};

// A convolution whose output only a pooling reads, run with it band of rows by band of rows
// (band_conv_pools): each thread convolves a band into its own small buffer and pools it from
// there, so the convolution's whole output is never written out of the cache.
struct BandPlan {
    struct Band {
        int conv, pool;                 // indices in convs and pools
        size_t src_skip, dst_skip;      // bytes from the source's and the destination's start
        memory::desc src, buf, pooled;  // its source rows, its buffer, a channel block of it
    };
    int blocks = 1;                     // channel blocks, pooled one by one (dense windows)
    size_t dst_block = 0;               // bytes between channel blocks of the output
    std::vector<primitive> convs, pools;  // one per band shape, each made for one thread
    std::vector<memory::desc> pool_dsts;  // each pool's output: a window of a channel block
    std::vector<Band> bands;
    std::vector<std::pair<int, int>> operands;  // the convolution's weights, bias, post-op operands
    int src = -1, dst = -1;                     // values: the convolution's source, the pool's output
    size_t region = 0;                          // scratchpad bytes per thread: buffer + scratch
    size_t buf_bytes = 0;                       // of which the buffer
    int threads = 1;
};

// A WINOGRAD step: the source's tiles transformed into the matmul's source, a batched matmul by
// the transformed weights, its products transformed back into the output (winograd.hpp). The
// step's a: the source, b: the output, c: an addend (-1: none), d: the bias (-1: none); its
// args: the matmul's.
struct WinoPlan {
    byoc_wino::Geometry g;
    std::vector<byoc_wino::Post> posts;  // an ADD reads step.c
    bool src_blocked = false, dst_blocked = false;
    int64_t block = 0;  // tiles per matmul
};

// A tensor's u8 copy and the scale and zero point it was quantized with (quantize_dynamic).
struct Quantized {
    int src, q, scale, zp;
};

struct Net {
    engine eng{engine::kind::cpu, 0};
    bool bf16 = false;
    bool typed_bf16 = false;  // dense layers in bf16 by types (layouts.hpp's typed_bf16_here)
    bool winograd = true;  // lower_winograd may run 3-tap and 3x3 convolutions as Winograd
    int threads = 0;  // OpenMP threads per run; 0: OpenMP's default
    std::vector<Value> values;
    std::vector<Op> ops;
    std::vector<int> inputs, outputs;
    std::vector<Step> steps;
    int current_op = 0;
    std::vector<std::pair<int, memory::desc>> conv_key;
    std::vector<int> conv_val;
    std::vector<Quantized> quantized;  // quantize_dynamic's, per source tensor
    std::vector<BandPlan> bands;       // BANDED steps' plans
    std::vector<WinoPlan> winos;       // WINOGRAD steps' plans
    std::vector<byoc_resize::Plan> resizes;  // RESIZE steps' plans
    size_t arena_size = 0, scratch_size = 0;
    bool finalized = false;
    std::mutex lock;
    std::vector<std::unique_ptr<Arena>> pool;
    std::string error;
    std::unordered_map<int, std::string> impl_names;  // bd_step_impl's answers
};

[[noreturn]] void fail(const std::string &msg) { throw std::runtime_error(msg); }

// oneDNN sizes a primitive's work split for the OpenMP threads of the thread that creates it,
// and runs it that way whatever the thread count at run time. So a net sets its own count
// before making primitives, not only before running them: this OpenMP setting is per thread
// and outlives the call (a net made after a one-thread net ran its big convolutions on one).
void use_threads(const Net &n) {
    if (n.threads > 0) omp_set_num_threads(n.threads);
}


int root(const Net &n, int v) {
    while (n.values[v].alias_of >= 0) v = n.values[v].alias_of;
    return v;
}

// Where value v's bytes start in its root's storage.
size_t skipped(const Net &n, int v) {
    size_t bytes = 0;
    for (; n.values[v].alias_of >= 0; v = n.values[v].alias_of) bytes += n.values[v].skip;
    return bytes;
}

int new_value(Net &n, const dims_t &d, const memory::desc &md) {
    Value v;
    v.dims = d;
    v.md = md;
    v.has_md = true;
    v.defined = true;
    n.values.push_back(v);
    return (int)n.values.size() - 1;
}

// Value v's storage described by md (a strided view of it): a new tensor that shares v's bytes.
int view_of(Net &n, int v, const memory::desc &md) {
    int w = new_value(n, md.get_dims(), md);
    n.values[w].alias_of = v;
    return w;
}

void check_value(const Net &n, int v, const char *what) {
    if (v < 0 || v >= (int)n.values.size()) fail(std::string(what) + ": no such tensor");
    if (!n.values[v].has_md) fail(std::string(what) + ": tensor is read before it is written");
}

// A new constant of layout md, all zeros.
int zeros(Net &n, const memory::desc &md) {
    int out = new_value(n, md.get_dims(), md);
    Value &o = n.values[out];
    o.kind = CONST;
    size_t size = std::max<size_t>(md.get_size(), 64);
    o.data = std::shared_ptr<char>((char *)std::aligned_alloc(64, (size + 63) / 64 * 64), std::free);
    if (!o.data) fail("out of memory making a constant");
    std::memset(o.data.get(), 0, size);
    return out;
}

// A new constant of layout want: the bytes at data (layout md) converted once. The descriptions
// are copies: making the constant may move n.values, where they may live.
int const_from(Net &n, const memory::desc md, const void *data, const memory::desc want) {
    int out = zeros(n, want);
    memory from(md, n.eng, const_cast<void *>(data));
    memory to(want, n.eng, n.values[out].data.get());
    stream s(n.eng);
    reorder(from, to).execute(s, from, to);
    s.wait();
    return out;
}

// A constant converted once, at finalize time.
int reorder_const(Net &n, int v, const memory::desc &want) {
    return const_from(n, n.values[v].md, n.values[root(n, v)].data.get() + skipped(n, v), want);
}

// Whether two descriptions of dense float32 tensors (no inner blocks) of the same dims name the
// same bytes: their strides differ only on dims of size 1 (a 1-channel NCHW and NHWC tensor).
bool same_bytes(const memory::desc &a, const memory::desc &b) {
    if (a.get_dims() != b.get_dims() || a.get_data_type() != b.get_data_type() ||
        a.get_format_kind() != memory::format_kind::blocked ||
        b.get_format_kind() != memory::format_kind::blocked || a.get_inner_nblks() != 0 ||
        b.get_inner_nblks() != 0 || a.get_size() != b.get_size() ||
        a.get_padded_dims() != a.get_dims() || b.get_padded_dims() != b.get_dims() ||
        a.get_padded_offsets() != b.get_padded_offsets() || a.get_submemory_offset() != 0 ||
        b.get_submemory_offset() != 0)
        return false;
    const dims_t d = a.get_dims(), sa = a.get_strides(), sb = b.get_strides();
    int64_t count = 1;
    for (auto x : d) count *= x;
    if (a.get_size() != (size_t)count * memory::data_type_size(a.get_data_type())) return false;
    for (size_t i = 0; i < d.size(); ++i)
        if (d[i] != 1 && sa[i] != sb[i]) return false;
    return true;
}

// The value `v` in layout `want`: itself, a view of the same bytes, or a reordered copy (made
// once per layout).
int ensure_md(Net &n, int v, const memory::desc &want) {
    if (n.values[v].md == want) return v;
    if (same_bytes(n.values[v].md, want)) return view_of(n, v, want);
    for (size_t i = 0; i < n.conv_key.size(); ++i)
        if (n.conv_key[i].first == v && n.conv_key[i].second == want) return n.conv_val[i];
    int out;
    if (n.values[root(n, v)].kind == CONST) {
        out = reorder_const(n, v, want);
    } else {
        out = new_value(n, n.values[v].dims, want);
        Step s;
        s.prim = reorder(reorder::primitive_desc(n.eng, n.values[v].md, n.eng, want));
        s.has_prim = true;
        s.args = {{DNNL_ARG_FROM, v}, {DNNL_ARG_TO, out}};
        n.steps.push_back(s);
    }
    n.conv_key.push_back({v, want});
    n.conv_val.push_back(out);
    return out;
}

int ensure_plain(Net &n, int v) { return ensure_md(n, v, plain(n.values[v].dims)); }

// The element type a binary or an int8 convolution writes (ops.py's DST_TYPES: 0 float32; a
// statically quantized tensor, 1 u8 or 2 s8).
dt dst_type(int64_t code) {
    if (code == 0) return dt::f32;
    if (code == 1) return dt::u8;
    if (code == 2) return dt::s8;
    fail("bad destination type");
}

// md's layout for elements of type t: the same strides when dense, else the layout a binary
// kernel picks for it (its destination follows its first source's blocks).
memory::desc retyped(const Net &n, const memory::desc &md, dt t) {
    if (md.get_data_type() == t) return md;
    if (md.get_inner_nblks() == 0) return memory::desc(md.get_dims(), t, md.get_strides());
    const memory::desc out(md.get_dims(), t, tag::any);
    return binary::primitive_desc(n.eng, algorithm::binary_add, md, md, out).dst_desc();
}

bool is_plain(const Net &n, int v) { return n.values[v].md == plain(n.values[v].dims); }

void set_out(Net &n, int out, const memory::desc &md) {
    Value &o = n.values[out];
    if (o.dims != md.get_dims()) fail("the output shape does not match what oneDNN computes");
    o.md = md;
    o.has_md = true;
}

void push(Net &n, const primitive &p, std::vector<std::pair<int, int>> args) {
    Step s;
    s.prim = p;
    s.has_prim = true;
    s.args = std::move(args);
    n.steps.push_back(s);
}

// A primitive of one source and one destination (pooling, LRN, resampling): its source reordered
// to the layout it was made for, its output in the layout it chose.
template <class Prim>
void push_src_dst(Net &n, int a, int out, const typename Prim::primitive_desc &pd) {
    a = ensure_md(n, a, pd.src_desc());
    set_out(n, out, pd.dst_desc());
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    push(n, Prim(pd), {{DNNL_ARG_SRC, a}, {DNNL_ARG_DST, out}});
}

algorithm eltwise_alg(int64_t a) { return by_id(ELTWISE_ALGS, a, "eltwise"); }

// The id of binary algorithm `name` (ops.py's: its position + 1).
int64_t binary_id(const std::string &name) {
    for (size_t i = 0; i < sizeof(BINARY_ALGS) / sizeof(BINARY_ALGS[0]); ++i)
        if (name == BINARY_ALGS[i].name) return (int64_t)i + 1;
    fail("no binary algorithm " + name);
}
algorithm binary_alg(int64_t a) { return by_id(BINARY_ALGS, a, "binary"); }

// Reads a post-op list from the front of op.ip / op.fp: [n, (kind, alg, tensor) * n] and
// [(alpha, beta) * n]. Returns where the op's own params start.
struct Post {
    int kind;
    int64_t alg;
    int tensor;
    float alpha, beta;
};

std::pair<size_t, size_t> read_posts(const Net &n, const Op &op, std::vector<Post> &posts) {
    if (op.ip.empty()) fail("missing post-op count");
    int64_t count = op.ip[0];
    if (count < 0 || count > 16 || op.ip.size() < 1 + 3 * (size_t)count ||
        op.fp.size() < 2 * (size_t)count)
        fail("bad post-op list");
    for (int64_t i = 0; i < count; ++i) {
        Post p{(int)op.ip[1 + 3 * i], op.ip[2 + 3 * i], (int)op.ip[3 + 3 * i], op.fp[2 * i],
               op.fp[2 * i + 1]};
        if (p.kind < 1 || p.kind >= PO_END) fail("bad post-op kind");
        if (p.kind != PO_ELTWISE) {
            check_value(n, p.tensor, "post-op operand");
            if (n.values[p.tensor].md.get_data_type() != dt::f32)
                fail("a post-op operand must be float32");
        }
        posts.push_back(p);
    }
    return {1 + 3 * (size_t)count, 2 * (size_t)count};
}

primitive_attr plain_attr() {
    primitive_attr attr;
    attr.set_scratchpad_mode(scratchpad_mode::user);
    return attr;
}

// Builds the attr for a list of post-ops. The dst layout is not known before the primitive
// is made, so binary operands of full dst size are described with `any`-free plain layouts
// first; `dst_md` (when given) is used to describe them in the dst layout instead.
// `operand_dims`, when given, are the binary operands' dims to describe (one per post-op).
primitive_attr make_attr(Net &n, const std::vector<Post> &posts, bool fpmath,
                         const memory::desc *dst_md, const dims_t &dst_dims,
                         const std::vector<dims_t> &operand_dims = {}) {
    primitive_attr attr;
    attr.set_scratchpad_mode(scratchpad_mode::user);
    if (fpmath && n.bf16) attr.set_fpmath_mode(fpmath_mode::bf16);
    post_ops po;
    for (size_t i = 0; i < posts.size(); ++i) {
        const Post &p = posts[i];
        if (p.kind == PO_ELTWISE) {
            append_eltwise(po, eltwise_alg(p.alg), p.alpha, p.beta);
        } else if (p.kind == PO_SUM) {
            po.append_sum(1.f);
        } else {
            const dims_t d = operand_dims.empty() ? n.values[p.tensor].dims : operand_dims[i];
            memory::desc md = (d == dst_dims && dst_md) ? *dst_md : plain(d);
            po.append_binary(binary_alg(p.alg), md);
        }
    }
    attr.set_post_ops(po);
    return attr;
}

// Adds the post-op operands to a step's args (and a copy of the sum operand into dst first).
void post_args(Net &n, const std::vector<Post> &posts, const memory::desc &dst_md, int out,
               std::vector<std::pair<int, int>> &args) {
    for (size_t i = 0, slot = 0; i < posts.size(); ++i) {
        const Post &p = posts[i];
        const int at = (int)slot;  // its index in oneDNN's list (a tanh takes three)
        slot += p.kind == PO_ELTWISE ? eltwise_width(eltwise_alg(p.alg)) : 1;
        if (p.kind == PO_SUM && p.tensor < 0) continue;  // accumulates what dst holds
        if (p.kind == PO_SUM) {
            int r = ensure_md(n, p.tensor, dst_md);
            Step s;
            s.prim = reorder(reorder::primitive_desc(n.eng, dst_md, n.eng, dst_md));
            s.has_prim = true;
            s.args = {{DNNL_ARG_FROM, r}, {DNNL_ARG_TO, out}};
            s.sum_copy = true;
            n.steps.push_back(s);
        } else if (p.kind == PO_BINARY) {
            const dims_t d = n.values[p.tensor].dims;
            int t = d == dst_md.get_dims() ? ensure_md(n, p.tensor, dst_md)
                                           : ensure_plain(n, p.tensor);
            args.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(at) | DNNL_ARG_SRC_1, t});
        }
    }
}

dims_t take(const std::vector<int64_t> &ip, size_t &at, size_t count) {
    if (at + count > ip.size()) fail("too few integer parameters");
    dims_t d(ip.begin() + at, ip.begin() + at + count);
    at += count;
    return d;
}

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
    s.custom = WINOGRAD;
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

// An int8 value held as a float (quantized weights and zero points arrive as float32).
bool int8(float v) { return v >= -128.f && v <= 127.f && v == std::nearbyint(v); }

// Tensor `src` quantized the way ONNX's DynamicQuantizeLinear does, once per tensor however many
// layers read it: oneDNN's min and max reductions find its range, a custom step (QPARAMS) turns
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
    s.custom = QPARAMS;
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

// DynamicQuantizeLinear's scale and zero point from the range [min, max] (onnxruntime's formula:
// the range stretched to hold 0, the zero point rounded half to even).
void run_qparams(const memory &range, const memory &params) {
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

// A convolution of dynamically quantized int8 (quantize_dynamic's ConvInteger of the u8
// activation and s8 weights, times both scales, plus a bias), as lower_qmatmul: the source is
// quantized at run time (quantize_dynamic), then reordered into the layout the int8
// convolution picks (a u8 copy); the weights' scale is one, or one per output channel.
// int_bias (older onnxruntimes): the bias is int32(floor(bias / scale)) added to the product,
// computed per run by a custom step (QBIAS) as scale * floor(bias / scale).
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
        s.custom = QBIAS;
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

// The bias of a convolution whose bias older onnxruntimes quantized at run time: with
// s = x's scale times the weights' (one, or one per channel), int32(floor(bias / s)) was added
// to the int32 product before it was scaled by s; here s * floor(bias / s) is the float bias.
void run_qbias(const memory &xscale, const memory &wscale, const memory &bias, const memory &out) {
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

void lower_eltwise(Net &n, const Op &op) {
    if (op.ins.size() != 1 || op.ip.size() != 1 || op.fp.size() != 2) fail("bad eltwise op");
    int a = op.ins[0];
    check_value(n, a, "eltwise src");
    if (n.values[a].dims != n.values[op.out].dims) fail("eltwise: shapes differ");
    memory::desc md = n.values[a].md;
    if (eltwise_alg(op.ip[0]) == algorithm::eltwise_tanh) {  // plain where blocked is ref
        auto pd = fast_layout(md, plain(n.values[a].dims), [&](const memory::desc &m) {
            return tanh_as_binary(n.eng, m, plain_attr());
        });
        a = ensure_md(n, a, pd.src_desc(0));
        set_out(n, op.out, pd.dst_desc());
        n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
        push(n, binary(pd), {{DNNL_ARG_SRC_0, a}, {DNNL_ARG_SRC_1, a}, {DNNL_ARG_DST, op.out}});
        return;
    }
    auto pd = eltwise_forward::primitive_desc(n.eng, prop_kind::forward_inference,
                                              eltwise_alg(op.ip[0]), md, md, op.fp[0], op.fp[1],
                                              plain_attr());
    set_out(n, op.out, pd.dst_desc());
    n.scratch_size = std::max(n.scratch_size, pd.scratchpad_desc().get_size());
    push(n, eltwise_forward(pd), {{DNNL_ARG_SRC, a}, {DNNL_ARG_DST, op.out}});
}

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
    s.custom = OP_SAFE_SOFTMAX;
    s.a = s.b = op.out;
    n.steps.push_back(s);
}

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

void lower_erf(Net &n, const Op &op) {
    if (op.ins.size() != 1) fail("bad erf op");
    int a = op.ins[0];
    check_value(n, a, "erf src");
    if (n.values[a].dims != n.values[op.out].dims) fail("erf: shapes differ");
    set_out(n, op.out, n.values[a].md);
    Step s;
    s.custom = OP_ERF;
    s.a = a;
    s.b = op.out;
    n.steps.push_back(s);
}

// A lookup table (lut.py): each u8 or s8 value of the source, in its dense layout, picks one of
// 256 entries (s8: -128 first), written as float32, u8 or s8 in the same layout. The table
// comes as a float32 constant; a u8 or s8 one must hold integers of its type's range.
void lower_lut(Net &n, const Op &op) {
    if (op.ins.size() != 2 || op.ip.size() != 1) fail("bad lut op");
    int a = op.ins[0], t = op.ins[1];
    check_value(n, a, "lut src");
    check_value(n, t, "lut table");
    const dims_t d = n.values[a].dims;
    if (d != n.values[op.out].dims) fail("lut: shapes differ");
    const dt src_t = n.values[a].md.get_data_type(), out_t = dst_type(op.ip[0]);
    if (src_t != dt::u8 && src_t != dt::s8) fail("lut: the source must be u8 or s8");
    {
        const Value &tv = n.values[t];
        if (tv.kind != CONST || tv.alias_of >= 0 || tv.dims != dims_t{256} || tv.md != plain(tv.dims))
            fail("lut: the table must be a constant of 256 float32 values");
    }
    int64_t count = 1;
    for (auto x : d) count *= x;
    const memory::desc md = n.values[a].md;
    if (md.get_inner_nblks() != 0 || md.get_padded_dims() != d || md.get_size() != (size_t)count)
        a = ensure_md(n, a, retyped(n, plain(d), src_t));
    // The table in the destination's type, made once.
    int typed = zeros(n, memory::desc({256}, out_t, tag::a));
    const float *from = (const float *)n.values[t].data.get();
    char *to = n.values[typed].data.get();
    for (int i = 0; i < 256; ++i) {
        const float v = from[i];
        if (out_t == dt::f32) {
            std::memcpy(to + 4 * i, &v, 4);
            continue;
        }
        const float lo = out_t == dt::u8 ? 0.f : -128.f, hi = out_t == dt::u8 ? 255.f : 127.f;
        if (!(v >= lo && v <= hi) || v != std::nearbyint(v)) fail("lut: a table entry is not in the type's range");
        if (out_t == dt::u8) ((uint8_t *)to)[i] = (uint8_t)v;
        else ((int8_t *)to)[i] = (int8_t)v;
    }
    set_out(n, op.out, retyped(n, n.values[a].md, out_t));
    Step s;
    s.custom = OP_LUT;
    s.a = a;
    s.b = op.out;
    s.c = typed;
    n.steps.push_back(s);
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

// While it lives (when `on`), this thread's OpenMP parallel regions have one thread.
struct OneThread {
    int before = 0;
    explicit OneThread(bool on) {
        if (!on) return;
        before = omp_get_max_threads();
        omp_set_num_threads(1);
    }
    ~OneThread() {
        if (before) omp_set_num_threads(before);
    }
};

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

void lower(Net &n, const Op &op) {
    switch (op.kind) {
        case OP_CONV:
        case OP_DECONV: lower_conv(n, op); break;
        case OP_MATMUL: lower_matmul(n, op); break;
        case OP_BINARY: lower_binary(n, op); break;
        case OP_ELTWISE: lower_eltwise(n, op); break;
        case OP_POOL: lower_pool(n, op); break;
        case OP_SOFTMAX:
        case OP_SAFE_SOFTMAX: lower_softmax(n, op); break;
        case OP_LAYERNORM: lower_layernorm(n, op); break;
        case OP_BATCHNORM: lower_batchnorm(n, op); break;
        case OP_CONCAT: lower_concat(n, op); break;
        case OP_ERF: lower_erf(n, op); break;
        case OP_LUT: lower_lut(n, op); break;
        case OP_VIEW: lower_view(n, op); break;
        case OP_TRANSPOSE: lower_transpose(n, op); break;
        case OP_LRN: lower_lrn(n, op); break;
        case OP_SLICE: lower_slice(n, op); break;
        case OP_RESAMPLE: lower_resample(n, op); break;
        case OP_SHUFFLE: lower_shuffle(n, op); break;
        case OP_QMATMUL: lower_qmatmul(n, op); break;
        case OP_REDUCE: lower_reduce(n, op); break;
        case OP_QCONV: lower_qconv(n, op); break;
        case OP_RNN: lower_rnn(n, op); break;
        default: fail("unknown op kind " + std::to_string(op.kind));
    }
}

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

// Steps i (a 2-D convolution) and i + 1 (a pooling of its output alone, windows not
// overlapping along the rows) as one BANDED step, when the output is large; false otherwise.
bool band_conv_pool(Net &n, size_t i, const std::vector<int> &readers) {
    const Step &c = n.steps[i], &p = n.steps[i + 1];
    if (!c.has_prim || !p.has_prim || c.paired || c.custom || p.custom ||
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
    s.custom = BANDED;
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

// Every convolution whose large output only a pooling reads becomes a BANDED step.
void band_conv_pools(Net &n) {
    std::vector<int> readers(n.values.size(), 0);  // steps reading each root, outputs count too
    for (auto &s : n.steps) {
        for (auto &a : s.args)
            if (a.first != DNNL_ARG_DST && a.first != DNNL_ARG_TO) readers[root(n, a.second)]++;
        for (int v : {s.a, s.b, s.c, s.d})
            if (s.custom && v >= 0) readers[root(n, v)]++;
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
        if (s.custom)
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

// A bilinear 2-D upsampling that writes an output of the partition in a layout other than
// plain NCHW (oneDNN's resampling writes its source's layout, and the output is then reordered)
// becomes a RESIZE step (resize.hpp) that writes the caller's array directly, on AVX-512, from
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
        r.custom = RESIZE;
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

Arena *make_arena(Net &n) {
    auto a = std::make_unique<Arena>();
    size_t bytes = n.arena_size + n.scratch_size + 64;
    a->buf = (char *)std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!a->buf) fail("out of memory allocating the partition's buffers");
    a->strm = stream(n.eng);
    int team = 2;  // a pair's
    for (const BandPlan &plan : n.bands) team = std::max(team, plan.threads);
    for (int t = 1; t < team; ++t) a->side.emplace_back(n.eng);
    for (size_t v = 0; v < n.values.size(); ++v) {
        const Value &r = n.values[root(n, (int)v)];
        void *ptr = nullptr;
        if (r.kind == CONST) ptr = r.data.get();
        else if (r.kind == INTERNAL) ptr = a->buf + r.offset;
        if (!n.values[v].has_md) fail("tensor " + std::to_string(v) + " is never written");
        if (ptr) ptr = (char *)ptr + skipped(n, (int)v);
        a->mems.emplace_back(n.values[v].md, n.eng, ptr);
    }
    memory scratch(memory::desc({(int64_t)std::max<size_t>(n.scratch_size, 1)}, dt::u8, tag::a),
                   n.eng, a->buf + n.arena_size);
    for (const BandPlan &plan : n.bands) {
        a->bands.emplace_back();
        for (size_t b = 0; b < plan.bands.size(); ++b) {
            const BandPlan::Band &band = plan.bands[b];
            char *region = a->buf + n.arena_size + (b % plan.threads) * plan.region;
            memory buf(band.buf, n.eng, region), scratch(
                memory::desc({(int64_t)(plan.region - plan.buf_bytes) + 1}, dt::u8, tag::a),
                n.eng, region + plan.buf_bytes);
            Arena::BandArgs args;
            for (auto &p : plan.operands) args.conv[p.first] = a->mems[p.second];
            args.conv[DNNL_ARG_SRC] = memory(band.src, n.eng, nullptr);
            args.conv[DNNL_ARG_DST] = buf;
            args.conv[DNNL_ARG_SCRATCHPAD] = scratch;
            const memory::desc &out = plan.pool_dsts[band.pool];
            for (int k = 0; k < plan.blocks; ++k)
                args.pools.push_back(
                    {{DNNL_ARG_SRC, memory(band.pooled, n.eng, region + k * band.pooled.get_size())},
                     {DNNL_ARG_DST, memory(out, n.eng, nullptr)},
                     {DNNL_ARG_SCRATCHPAD, scratch}});
            a->bands.back().push_back(std::move(args));
        }
    }
    for (auto &s : n.steps) {
        std::unordered_map<int, memory> args;
        for (auto &p : s.args) args[p.first] = a->mems[p.second];
        if (s.has_prim || s.custom == WINOGRAD) args[DNNL_ARG_SCRATCHPAD] = scratch;
        if (s.scratch_skip)  // a pair's second step: its own part of the scratchpad
            args[DNNL_ARG_SCRATCHPAD] =
                memory(memory::desc({(int64_t)(n.scratch_size - s.scratch_skip)}, dt::u8, tag::a),
                       n.eng, a->buf + n.arena_size + s.scratch_skip);
        a->args.push_back(std::move(args));
    }
    return a.release();
}

// erf(x) as a rational function of x clamped to [-4, 4] (Eigen's single-precision erf
// coefficients). The clamp works on the bits (|x| as an integer: float comparisons may trap,
// so a compiler keeps them as branches), which keeps the loop branch-free for OpenMP's simd
// directive; NaN stays NaN. Within 4.5e-7 of erf, 2.5e-7 relative near 0 (against double
// std::erf at 2M points over [-6, 6]). std::erf, a libm call per element, took 0.31 ms for
// 128 x 1536 values on two Zen 4 cores, this 0.11 ms (a QDQ MiniLM's GELU, whose Erf the
// quantizer sets apart, has three).
void run_erf(const memory &src, const memory &dst) {
    const float *x = (const float *)src.get_data_handle();
    float *y = (float *)dst.get_data_handle();
    int64_t count = (int64_t)(src.get_desc().get_size() / sizeof(float));
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < count; ++i) {
        uint32_t b;
        std::memcpy(&b, &x[i], sizeof b);
        const uint32_t mag = b & 0x7fffffffu, four = 0x40800000u;  // |x|, 4.0f
        const uint32_t c = (b & 0x80000000u) | (mag < four || mag > 0x7f800000u ? mag : four);
        float v;
        std::memcpy(&v, &c, sizeof v);
        const float v2 = v * v;
        float p = -2.72614225801306e-10f;
        p = p * v2 + 2.77068142495902e-08f;
        p = p * v2 - 2.10102402082508e-06f;
        p = p * v2 - 5.69250639462346e-05f;
        p = p * v2 - 7.34990630326855e-04f;
        p = p * v2 - 2.95459980854025e-03f;
        p = p * v2 - 1.60960333262415e-02f;
        float q = -1.45660718464996e-05f;
        q = q * v2 - 2.13374055278905e-04f;
        q = q * v2 - 1.68282697438203e-03f;
        q = q * v2 - 7.37332916720468e-03f;
        q = q * v2 - 1.42647390514189e-02f;
        y[i] = v * p / q;
    }
}

// A safe_softmax's output, in whatever dense layout its softmax wrote: NaN -> 0 in place.
void nan_to_zero(const memory &m) {
    byoc_dnnl::nan_to_zero((float *)m.get_data_handle(),
                           (int64_t)(m.get_desc().get_size() / sizeof(float)));
}

// dst[i] = table[src[i] ^ flip] over a dense u8 or s8 tensor (flip 0x80: an s8 source, whose
// -128 is entry 0). Scalar: about one value per cycle and core (AMD Zen 4).
template <class T>
void lut_scalar(const uint8_t *__restrict x, T *__restrict y, const T *__restrict table,
                int64_t count, uint8_t flip) {
    for (int64_t i = 0; i < count; ++i) y[i] = table[(uint8_t)(x[i] ^ flip)];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
// A u8 or s8 table with AVX-512 VBMI: two 128-entry permutes per 64 values, picked by each
// value's top bit. 11x the scalar loop on AMD Zen 4 (410k values: 10 us against 116 us).
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void lut_vbmi(
    const uint8_t *x, uint8_t *y, const uint8_t *table, int64_t count, uint8_t flip) {
    const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
    const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
    const __m512i f = _mm512_set1_epi8((char)flip);
    int64_t i = 0;
    for (; i + 64 <= count; i += 64) {
        const __m512i v = _mm512_xor_si512(_mm512_loadu_si512(x + i), f);
        const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1);
        const __m512i hi = _mm512_permutex2var_epi8(t2, v, t3);
        _mm512_storeu_si512(y + i, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
    }
    lut_scalar(x + i, y + i, table, count - i, flip);
}

// With AVX2: sixteen 16-entry byte shuffles per 32 values, one per high nibble; a value whose
// high nibble is not the shuffle's gets an index with its top bit set (x ^ 16j, plus 0x70
// saturated), which the shuffle turns into 0. 1.5x the scalar loop on AMD Zen 4.
__attribute__((target("avx2"))) void lut_avx2(const uint8_t *x, uint8_t *y, const uint8_t *table,
                                              int64_t count, uint8_t flip) {
    __m256i t[16];
    for (int j = 0; j < 16; ++j)
        t[j] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(table + 16 * j)));
    const __m256i f = _mm256_set1_epi8((char)flip), bias = _mm256_set1_epi8(0x70);
    int64_t i = 0;
    for (; i + 64 <= count; i += 64) {
        const __m256i v0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + i)), f);
        const __m256i v1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + i + 32)), f);
        __m256i r0 = _mm256_setzero_si256(), r1 = _mm256_setzero_si256();
        for (int j = 0; j < 16; ++j) {
            const __m256i k = _mm256_set1_epi8((char)(j << 4));
            r0 = _mm256_or_si256(r0, _mm256_shuffle_epi8(t[j], _mm256_adds_epu8(_mm256_xor_si256(v0, k), bias)));
            r1 = _mm256_or_si256(r1, _mm256_shuffle_epi8(t[j], _mm256_adds_epu8(_mm256_xor_si256(v1, k), bias)));
        }
        _mm256_storeu_si256((__m256i *)(y + i), r0);
        _mm256_storeu_si256((__m256i *)(y + i + 32), r1);
    }
    lut_scalar(x + i, y + i, table, count - i, flip);
}

// The u8 table loop this CPU runs best: 2 VBMI, 1 AVX2, 0 scalar. BYOC_DNNL_LUT_ISA (vbmi,
// avx2 or scalar) caps it, as ONEDNN_MAX_CPU_ISA caps oneDNN: to measure what a CPU without
// VBMI gets.
int lut_isa() {
    static const int isa = [] {
        int best = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw") ? 2
                   : __builtin_cpu_supports("avx2")                                          ? 1
                                                                                             : 0;
        const char *cap = std::getenv("BYOC_DNNL_LUT_ISA");
        if (cap && std::strcmp(cap, "avx2") == 0) best = std::min(best, 1);
        if (cap && std::strcmp(cap, "scalar") == 0) best = 0;
        return best;
    }();
    return isa;
}
#else
void lut_vbmi(const uint8_t *x, uint8_t *y, const uint8_t *table, int64_t count, uint8_t flip) {
    lut_scalar(x, y, table, count, flip);
}
void lut_avx2(const uint8_t *x, uint8_t *y, const uint8_t *table, int64_t count, uint8_t flip) {
    lut_scalar(x, y, table, count, flip);
}
int lut_isa() { return 0; }
#endif

void run_lut(const memory &src, const memory &dst, const memory &table) {
    const uint8_t *x = (const uint8_t *)src.get_data_handle();
    const int64_t count = (int64_t)src.get_desc().get_size();
    const uint8_t flip = src.get_desc().get_data_type() == dt::s8 ? 0x80 : 0;
    const bool f32 = dst.get_desc().get_data_type() == dt::f32;
    const int isa = f32 ? 0 : lut_isa();
    char *y = (char *)dst.get_data_handle();
    const void *t = table.get_data_handle();
    // Chunks of 4 KiB values per thread; a small table job stays on one thread.
    const int64_t per = isa == 2 ? 1 << 18 : 1 << 15, chunks = (count + 4095) / 4096;
    const int threads = (int)std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), count / per));
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t at = c * 4096, m = std::min<int64_t>(4096, count - at);
        const uint8_t *u8 = (const uint8_t *)t;
        if (f32) lut_scalar(x + at, (float *)y + at, (const float *)t, m, flip);
        else if (isa == 2) lut_vbmi(x + at, (uint8_t *)y + at, u8, m, flip);
        else if (isa == 1) lut_avx2(x + at, (uint8_t *)y + at, u8, m, flip);
        else lut_scalar(x + at, (uint8_t *)y + at, u8, m, flip);
    }
}

// OpenMP thread t's stream in a pair or a banded step.
stream &thread_stream(Arena &a, int t) { return t ? a.side[t - 1] : a.strm; }

// Steps i and i + 1 at once, one OpenMP thread each (both made for one thread). Each thread
// takes the next step not yet taken: a thread that wakes late (after the process sat idle)
// finds both taken, rather than holding the pair back by its delay.
void run_pair(Net &n, Arena &a, size_t i) {
    std::string error;
    std::atomic<int> next{0};
#pragma omp parallel num_threads(std::min(2, omp_get_max_threads()))
    for (int t = next++; t < 2; t = next++) {
        try {
            n.steps[i + t].prim.execute(thread_stream(a, omp_get_thread_num()), a.args[i + t]);
        } catch (const std::exception &e) {
#pragma omp critical
            error = e.what();
        }
    }
    if (!error.empty()) fail(error);
}

// A BANDED step: band b on thread b % threads (whose buffer its arguments name), its
// convolution into that buffer, then its pooling from there; all of them on thread 0 when
// fewer threads run (a nested region).
void run_banded(Net &n, Arena &a, const Step &s) {
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

// A WINOGRAD step, block of tiles by block: each transform in parallel over the tiles and
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

void set_error(char *err, size_t len, const std::string &msg) {
    if (err && len) {
        std::strncpy(err, msg.c_str(), len - 1);
        err[len - 1] = 0;
    }
}

}  // namespace

extern "C" {

void *bd_create(int bf16, int winograd, int nthreads, char *err, size_t errlen) {
    try {
        Net *n = new Net();
        n->bf16 = bf16 != 0;
        n->typed_bf16 = n->bf16 && byoc_dnnl::typed_bf16_here();
        n->winograd = winograd != 0;
        n->threads = nthreads;
        return n;
    } catch (const std::exception &e) {
        set_error(err, errlen, e.what());
        return nullptr;
    }
}

void bd_destroy(void *net) { delete (Net *)net; }

const char *bd_error(void *net) { return ((Net *)net)->error.c_str(); }

static bool valid_dims(int ndims, const int64_t *dims) {
    if (ndims < 1 || ndims > 6) return false;
    int64_t count = 1;
    for (int i = 0; i < ndims; ++i) {
        if (dims[i] < 1 || dims[i] > (int64_t(1) << 31)) return false;
        count *= dims[i];
        if (count > (int64_t(1) << 34)) return false;
    }
    return true;
}

int bd_tensor(void *net, int ndims, const int64_t *dims) {
    Net *n = (Net *)net;
    if (n->finalized || !valid_dims(ndims, dims)) {
        n->error = "bad tensor dims";
        return -1;
    }
    Value v;
    v.dims = dims_t(dims, dims + ndims);
    n->values.push_back(v);
    return (int)n->values.size() - 1;
}

int bd_const(void *net, int ndims, const int64_t *dims, const float *data) {
    Net *n = (Net *)net;
    try {
        int id = bd_tensor(net, ndims, dims);
        if (id < 0) return -1;
        Value &v = n->values[id];
        v.md = plain(v.dims);
        v.has_md = true;
        v.kind = CONST;
        size_t size = v.md.get_size();
        v.data = std::shared_ptr<char>((char *)std::aligned_alloc(64, (size + 63) / 64 * 64), std::free);
        if (!v.data) fail("out of memory");
        std::memcpy(v.data.get(), data, size);
        return id;
    } catch (const std::exception &e) {
        n->error = e.what();
        return -1;
    }
}

int bd_input(void *net, int id) {
    Net *n = (Net *)net;
    if (n->finalized || id < 0 || id >= (int)n->values.size() || n->values[id].has_md) {
        n->error = "bad input tensor";
        return -1;
    }
    Value &v = n->values[id];
    v.kind = INPUT;
    v.io_index = (int)n->inputs.size();
    v.md = plain(v.dims);
    v.has_md = true;
    n->inputs.push_back(id);
    return 0;
}

int bd_output(void *net, int id) {
    Net *n = (Net *)net;
    if (n->finalized || id < 0 || id >= (int)n->values.size()) {
        n->error = "bad output tensor";
        return -1;
    }
    for (int o : n->outputs)
        if (o == id) {
            n->error = "a tensor is an output twice";
            return -1;
        }
    n->outputs.push_back(id);
    return 0;
}

int bd_op(void *net, int kind, int nin, const int *ins, int out, int ni, const int64_t *ip,
          int nf, const float *fp) {
    Net *n = (Net *)net;
    try {
        if (n->finalized) fail("the net is already finalized");
        if (nin < 0 || nin > 4096 || ni < 0 || ni > 4096 || nf < 0 || nf > 4096)
            fail("bad parameter counts");
        if (out < 0 || out >= (int)n->values.size() || n->values[out].has_md ||
            n->values[out].kind != INTERNAL)
            fail("op output must be a new tensor");
        Op op{kind, std::vector<int>(ins, ins + nin), out, std::vector<int64_t>(ip, ip + ni),
              std::vector<float>(fp, fp + nf)};
        for (int v : op.ins)
            if (v != -1 && (v < 0 || v >= (int)n->values.size() || !n->values[v].has_md))
                fail("op reads a tensor that is not written before");
        // Only a binary kernel, a slice, a concat, and an int8 layer or a lookup table as its
        // source, read u8 or s8 tensors.
        const bool moves = kind == OP_BINARY || kind == OP_SLICE || kind == OP_CONCAT;
        for (size_t i = 0; i < op.ins.size(); ++i)
            if (op.ins[i] >= 0 && n->values[op.ins[i]].md.get_data_type() != dt::f32 && !moves &&
                !((kind == OP_QCONV || kind == OP_QMATMUL || kind == OP_LUT) && i == 0))
                fail("op reads an int8 tensor it cannot take");
        size_t before = n->steps.size();
        use_threads(*n);
        lower(*n, op);
        for (size_t i = before; i < n->steps.size(); ++i) {
            n->steps[i].op = n->current_op;
            if (!n->steps[i].threads) n->steps[i].threads = omp_get_max_threads();
        }
        n->current_op++;
        n->values[out].defined = true;
        return 0;
    } catch (const std::exception &e) {
        n->error = std::string("op ") + std::to_string(kind) + ": " + e.what();
        return -1;
    }
}

int bd_finalize(void *net) {
    Net *n = (Net *)net;
    try {
        for (int o : n->outputs) {
            if (!n->values[o].has_md) fail("an output is never written");
            if (n->values[o].md.get_data_type() != dt::f32) fail("an output is not float32");
        }
        use_threads(*n);
        band_conv_pools(*n);
        drop_sum_copies(*n);
        resize_outputs(*n);
        plan_arena(*n);
        n->finalized = true;
        n->pool.emplace_back(make_arena(*n));
        return 0;
    } catch (const std::exception &e) {
        n->error = e.what();
        return -1;
    }
}

size_t bd_arena_bytes(void *net) {
    Net *n = (Net *)net;
    return n->arena_size + n->scratch_size;
}

int bd_steps(void *net) { return (int)((Net *)net)->steps.size(); }

int bd_step_threads(void *net, int i) {
    Net *n = (Net *)net;
    return i >= 0 && i < (int)n->steps.size() ? n->steps[i].threads : -1;
}

int bd_step_op(void *net, int i) {
    Net *n = (Net *)net;
    return i >= 0 && i < (int)n->steps.size() ? n->steps[i].op : -2;
}

// "<primitive kind> <implementation>" of step i (e.g. "softmax ref:any"; a BANDED step's
// convolution, "... in bands, with its pooling"), "" for a step that is not a oneDNN
// primitive. The string lives as long as the net.
const char *bd_step_impl(void *net, int i) {
    Net *n = (Net *)net;
    if (i < 0 || i >= (int)n->steps.size()) return "";
    const Step &step = n->steps[i];
    if (step.resize >= 0) return "resampling byoc_linear:avx512 into the output";
    const primitive *prim = step.has_prim || step.wino >= 0 ? &step.prim
                            : step.band >= 0                ? &n->bands[step.band].convs[0]
                                                            : nullptr;
    const_dnnl_primitive_desc_t pd = nullptr;
    const char *impl = nullptr;
    if (!prim || dnnl_primitive_get_primitive_desc(prim->get(), &pd) != dnnl_success ||
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
        return "";
    std::string &s = n->impl_names[i];
    auto kind = (dnnl_primitive_kind_t)prim->get_kind();
    s = std::string(dnnl_prim_kind2str(kind)) + " " + impl;
    if (step.band >= 0) s += " in bands, with its pooling";
    if (step.wino >= 0)
        s = std::string("convolution winograd ") +
            (n->winos[step.wino].g.dims == 2 ? "F(4x4,3x3)" : "F(4,3)") + " with " + s;
    return s.c_str();
}

int bd_run(void *net, void *const *ins, void *const *outs, double *times, char *err,
           size_t errlen) {
    Net *n = (Net *)net;
    if (!n->finalized) {
        set_error(err, errlen, "the net is not finalized");
        return -1;
    }
    Arena *a = nullptr;
    try {
        use_threads(*n);
        {
            std::lock_guard<std::mutex> g(n->lock);
            if (!n->pool.empty()) {
                a = n->pool.back().release();
                n->pool.pop_back();
            }
        }
        if (!a) a = make_arena(*n);
        for (size_t v = 0; v < n->values.size(); ++v) {
            const Value &r = n->values[root(*n, (int)v)];
            const size_t skip = skipped(*n, (int)v);
            if (r.kind == INPUT) a->mems[v].set_data_handle((char *)ins[r.io_index] + skip);
            else if (r.kind == OUTPUT) a->mems[v].set_data_handle((char *)outs[r.io_index] + skip);
        }
        for (size_t i = 0; i < n->steps.size(); ++i) {
            const Step &s = n->steps[i];
            const size_t at = i;
            auto t0 = std::chrono::steady_clock::now();
            if (s.paired) {
                run_pair(*n, *a, i);
                ++i;  // the pair's second step ran too; the pair's time is its first's
                if (times) times[i] = 0;
            } else if (s.has_prim) s.prim.execute(a->strm, a->args[i]);
            else if (s.custom == QPARAMS) run_qparams(a->mems[s.a], a->mems[s.b]);
            else if (s.custom == QBIAS) run_qbias(a->mems[s.a], a->mems[s.b], a->mems[s.c], a->mems[s.d]);
            else if (s.custom == BANDED) run_banded(*n, *a, s);
            else if (s.custom == WINOGRAD) run_winograd(*n, *a, i);
            else if (s.custom == RESIZE)
                byoc_resize::run(n->resizes[s.resize], (const float *)a->mems[s.a].get_data_handle(),
                                 (float *)a->mems[s.c].get_data_handle(),
                                 (float *)a->mems[s.b].get_data_handle());
            else if (s.custom == OP_LUT) run_lut(a->mems[s.a], a->mems[s.b], a->mems[s.c]);
            else if (s.custom == OP_SAFE_SOFTMAX) nan_to_zero(a->mems[s.a]);
            else run_erf(a->mems[s.a], a->mems[s.b]);
            if (times) {
                a->strm.wait();
                times[at] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            }
        }
        a->strm.wait();
        std::lock_guard<std::mutex> g(n->lock);
        n->pool.emplace_back(a);
        return 0;
    } catch (const std::exception &e) {
        set_error(err, errlen, e.what());
        delete a;
        return -1;
    }
}

}  // extern "C"
