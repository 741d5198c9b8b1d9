// dnnl_kernels.h: byoc-dnnl's op-level oneDNN kernel library, for codegen = "c".
//
// The DNNL blog post's `dnnl_kernel` idea: generated C++ calls one function per op or composite
// (conv, matmul, binary, ...) instead of interpreting a JSON graph. Unlike the blog's, each
// kernel is made once: its primitive is created and its constant weights are reordered into the
// layout oneDNN picked when the kernel is made, then `run` reuses both. Between kernels every
// tensor is dense row-major float32 (the layout ONNX uses); a kernel reorders its inputs and
// output to and from oneDNN's blocked layouts itself, in the run's workspace.
//
// Only kernels.cpp includes oneDNN's headers; this header needs the C++ standard library alone,
// so a generated partition compiles in about a second. Errors are std::runtime_error.

#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace dnnl_kernels {

using Dims = std::vector<int64_t>;

struct Context;  // oneDNN's engine, the settings, the kernels made with it, a pool of frames
struct Kernel;   // one primitive (plus reorders), made once
struct Frame;    // what one run uses: a stream, the partition's buffers, the kernels' workspace

// An operand: its dims and, for a constant, its values (copied and reordered when the kernel is
// made). An operand without values is read at run time, from `run`'s `ins`, in operand order.
struct In {
    Dims dims;
    const float *data = nullptr;
};

// A post-op of conv, matmul and binary: "eltwise" (alg: relu, logistic, tanh, clip, ...), "sum"
// (adds the operand into the output) or "binary" (alg: add, sub, mul, div; the operand may
// broadcast).
struct Post {
    const char *kind;
    const char *alg;
    float alpha;
    float beta;
    In operand;
};
using Posts = std::vector<Post>;

// A context for kernels run on `threads` OpenMP threads (0: OpenMP's default). It sets this
// thread's count, so make its kernels right after, on this thread.
Context *context(bool bf16, int threads);
void destroy(Context *ctx);

Kernel *conv(Context &c, bool deconv, const In &src, const In &weights, const In &bias,
             const Dims &dst, const Dims &strides, const Dims &dilations, const Dims &pads_begin,
             const Dims &pads_end, const Posts &posts);
// perm_a, perm_b: read a or b through a transpose of its storage; perm_dst: write the product
// through one (the transpose the graph applies next). Empty: none.
Kernel *matmul(Context &c, const In &a, const In &b, const In &bias, const Dims &dst,
               const Posts &posts, const Dims &perm_a = {}, const Dims &perm_b = {},
               const Dims &perm_dst = {});
Kernel *binary(Context &c, const char *alg, const In &a, const In &b, const Posts &posts);
Kernel *eltwise(Context &c, const char *alg, float alpha, float beta, const In &src);
Kernel *pool(Context &c, const char *alg, const In &src, const Dims &dst, const Dims &kernel,
             const Dims &strides, const Dims &dilations, const Dims &pads_begin,
             const Dims &pads_end);
// ReduceSum, ReduceMean or ReduceMax ("sum", "mean", "max") over adjacent axes: dst keeps src's
// rank, with 1 for each reduced dim.
Kernel *reduce(Context &c, const char *alg, const In &src, const Dims &dst);
// Local response normalization across channels (ONNX LRN; an odd size).
Kernel *lrn(Context &c, int size, float alpha, float beta, float k, const In &src);
// Resampling of the spatial dims (ONNX Resize, nearest or linear) to dst's dims.
Kernel *resample(Context &c, const char *alg, const In &src, const Dims &dst);
Kernel *softmax(Context &c, int axis, const In &src);
// A softmax whose NaN become 0 (PyTorch's _safe_softmax: a row masked entirely with -inf is 0).
Kernel *safe_softmax(Context &c, int axis, const In &src);
Kernel *layernorm(Context &c, float epsilon, const In &src, const In &scale, const In &shift);
Kernel *batchnorm(Context &c, float epsilon, const In &src, const In &mean, const In &variance,
                  const In &scale, const In &shift);
Kernel *concat(Context &c, int axis, const std::vector<In> &srcs, const Dims &dst);
Kernel *erf(Context &c, const In &src);
Kernel *transpose(Context &c, const Dims &perm, const In &src);
// Slice: dst[k...] = src[offsets + k * steps...] (steps >= 1).
Kernel *slice(Context &c, const Dims &offsets, const Dims &steps, const In &src,
              const Dims &dst);
// Channel shuffle: dst channel j * groups + i is src channel i * C / groups + j.
Kernel *shuffle(Context &c, int64_t groups, const In &src);

// "<primitive kind> <implementation>" oneDNN picked (e.g. "convolution brgconv:avx2").
const char *implementation(const Kernel &k);
// The OpenMP threads its primitive was made for (the context's `threads`, when given).
int threads(const Kernel &k);

// A frame for one run with `buffer_bytes` of partition buffers; give it back with `release`.
// Concurrent runs get different frames.
Frame *acquire(Context &c, size_t buffer_bytes);
void release(Context &c, Frame *f);
float *buffer(Frame &f, size_t offset);

// Runs a kernel: `ins` are its run-time operands in operand order, `dst` the dense output.
void run(Kernel &k, Frame &f, std::initializer_list<const float *> ins, float *dst);

// Makes a kernel; an error names it.
template <class F>
Kernel *made(const char *name, F &&make) {
    try {
        return make();
    } catch (const std::exception &e) {
        throw std::runtime_error(std::string(name) + ": " + e.what());
    }
}

// Calls `body`; an exception becomes -1 and its message in err.
template <class F>
int guard(char *err, size_t errlen, F &&body) {
    try {
        body();
        return 0;
    } catch (const std::exception &e) {
        if (err && errlen) {
            std::strncpy(err, e.what(), errlen - 1);
            err[errlen - 1] = 0;
        }
        return -1;
    }
}

}  // namespace dnnl_kernels
