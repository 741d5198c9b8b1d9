// byoc-dnnl native runtime: a whole partition as one oneDNN "net", run in one C call.
//
// Only the shim sees oneDNN's enums and types (compiled against the installed dnnl.hpp); Python
// talks to it through the small extern "C" API at the bottom, declared again in native.py.
//
// One translation unit: this file includes the net (shim/net.hpp), each family's C++ half
// (shim/<family>.hpp, mirroring byoc_dnnl/kinds/<family>.py: the lower_<kind> of its kinds) and
// the passes over the finished net (shim/finalize.hpp). bd_op calls a kind's lower_<kind>
// through LOWER, a table generated from the kinds table (ops.header()'s BYOC_DNNL_KINDS).
//
// A net is built op by op, then finalized: the passes rewrite and plan it (an arena plan:
// buffer reuse by lifetime + one shared user scratchpad). A run borrows an arena from a pool
// (or makes one), so concurrent runs never share buffers.

#include <oneapi/dnnl/dnnl_debug.h>

#include "shim/net.hpp"

#include "shim/int8.hpp"
#include "shim/conv.hpp"
#include "shim/matmul.hpp"
#include "shim/norm.hpp"
#include "shim/eltwise.hpp"
#include "shim/binary.hpp"
#include "shim/pool.hpp"
#include "shim/shape.hpp"
#include "shim/resample.hpp"
#include "shim/rnn.hpp"

#include "shim/finalize.hpp"

namespace {

// Each kernel kind's lowering, by id: lower_<kind> of its family's file. The list is generated
// from byoc_dnnl.kinds (ops.header()): a kind whose function is missing does not compile.
using Lower = void (*)(Net &, const Op &);
#define BYOC_DNNL_LOWER(kind) lower_##kind,
const Lower LOWER[] = {nullptr, BYOC_DNNL_KINDS(BYOC_DNNL_LOWER)};
#undef BYOC_DNNL_LOWER
static_assert(sizeof(LOWER) / sizeof(LOWER[0]) == OP_END, "one lowering per kernel kind id");

void lower(Net &n, const Op &op) {
    if (op.kind < 1 || op.kind >= OP_END) fail("unknown op kind " + std::to_string(op.kind));
    LOWER[op.kind](n, op);
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
        if (s.has_prim || s.wino >= 0) args[DNNL_ARG_SCRATCHPAD] = scratch;
        if (s.scratch_skip)  // a pair's second step: its own part of the scratchpad
            args[DNNL_ARG_SCRATCHPAD] =
                memory(memory::desc({(int64_t)(n.scratch_size - s.scratch_skip)}, dt::u8, tag::a),
                       n.eng, a->buf + n.arena_size + s.scratch_skip);
        a->args.push_back(std::move(args));
    }
    return a.release();
}

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
            else s.run(*n, *a, i);
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
