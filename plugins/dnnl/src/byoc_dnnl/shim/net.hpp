// The net a partition is built into, and what every family's lowering builds it with.
//
// shim.cpp is one translation unit: the net (this file), one file per family of kernel kinds
// mirroring byoc_dnnl/kinds/ (shim/<family>.hpp: each kind's lower_<kind>, and the run_<step>
// of the custom steps it adds), the passes over the finished net (finalize.hpp), then the C API.
// Every file reads namespace byoc_ops (OP_<KIND>, PO_<KIND>, the algorithm tables), which
// ops.header() generates and native.source() puts in front of shim.cpp.
//
// A net is built op by op (tensors are ids, ops reference them): a lowering creates its
// primitives once with format_tag::any where oneDNN may pick its blocked layouts, reorders
// constant weights once (ensure_md), and adds steps; a reorder is inserted only where a
// consumer wants another layout.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
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

struct Net;
struct Arena;
// A custom step's work (a step with no oneDNN primitive): step i of the net, on the arena's
// memories. Each family's file defines the run_<step> of the custom steps its lowerings add.
using Run = void (*)(Net &, Arena &, size_t i);

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
    Run run = nullptr;  // a custom step (no primitive): run_erf, run_lut, run_winograd, ...
    int a = -1, b = -1, c = -1, d = -1;
    int op = -1;     // the op (bd_op call) this step belongs to; -1: an output reorder
    int threads = 0; // the OpenMP threads its primitive was made for
    int band = -1;           // a banded step (run_banded): its plan in Net::bands
    int wino = -1;           // a Winograd step: its plan in Net::winos (prim: its matmul)
    int resize = -1;         // a resize step: its plan in Net::resizes (a: source, b: output, c: plane)
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
    // Banded steps: per plan, per band, the convolution's arguments and each block's pool's
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

// A Winograd step (conv.hpp): the source's tiles transformed into the matmul's source, a batched matmul by
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
    std::vector<BandPlan> bands;       // banded steps' plans
    std::vector<WinoPlan> winos;       // Winograd steps' plans
    std::vector<byoc_resize::Plan> resizes;  // resize steps' plans
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

// OpenMP thread t's stream in a pair or a banded step.
stream &thread_stream(Arena &a, int t) { return t ? a.side[t - 1] : a.strm; }

}  // namespace
