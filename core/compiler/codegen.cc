#include "core/compiler/codegen.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "core/base/error.h"

namespace oar::compiler {
namespace {

bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat64; }

// float32 math without libm calls, so that `#pragma omp simd` loops vectorise it (glibc's vector variants
// are only declared under -ffast-math, which we do not use; a scalar call keeps the whole loop scalar).
// Branch-free: every case is a select, vectorised with -fno-trapping-math (kernel.cc passes it). Each is
// checked against the double-precision libm result over the whole float range (every 61st bit pattern,
// edges included: 0, -0, denormals, ±FLT_MAX, ±inf, NaN) and, as generated code, against eager and the
// loop interpreter (compiler_test.cc, CinnTest.GeneratedMathMatchesEagerOverEveryRange).
// - oar_expf: n = rint(x / ln 2) by adding 1.5 * 2^23 (n is then the low bits of the sum: no rounding or
//   float-to-int conversion instruction), Cody-Waite reduction r = x - n ln 2 in two parts, exp(r) as a
//   degree-6 polynomial 1 + r + c2 r^2 + ... + c6 r^6 in Horner form with fused multiply-adds (a Chebyshev
//   interpolant of (exp(r) - 1 - r) / r^2 on |r| <= ln 2 / 2 made for this file: 1.1e-8 relative before
//   rounding); 2^n applied as two factors built in the exponent bits, so results near FLT_MAX stay finite
//   and those below FLT_MIN are the right denormals. Only the top is clamped (at 89: +inf); a NaN runs
//   through the arithmetic and comes out NaN, and x < -104 selects 0 at the end (the clamps and NaN selects
//   of the earlier form vectorised into 11 operations, GCC cannot make min/max of them). 25 AVX2 operations
//   per 8 floats where Cephes' degree-7 form with floor and conversion took 38 (PERFORMANCE.md, h19c).
//   Max error, every float against double exp: 0.97 ulp for normal results with FMA (1.26 ulp without),
//   0.88 x 2^-149 for denormal ones. exp(x) = +inf above 88.7228 (as expf), 0 below -103.97, exp(-inf) = 0,
//   NaN stays NaN.
// - oar_logf: x = m 2^e with m in [sqrt(1/2), sqrt(2)), Cephes' degree-9 polynomial for log(m), e ln 2 in
//   two parts; denormals scaled by 2^23 first. Max error 0.80 ulp. log(±0) = -inf, log(x < 0) = NaN,
//   log(+inf) = +inf, NaN stays NaN.
// - oar_log1pf: log(u) of u = 1 + x with the rounding of u corrected, (x - (u - 1)) / u; x where u == 1
//   (tiny and denormal x, -0 kept). Max error 1.44 ulp. log1p(-1) = -inf, below -1 NaN, +inf stays +inf.
// - oar_sigmoidf: 1 / (1 + e) for x >= 0, e / (1 + e) below, with e = exp(-|x|) in (0, 1], so nothing
//   overflows and sigmoid(x) for x < -88 is the right denormal rather than 1 / inf = 0 (eager's rule too).
//   Max error 2.68 ulp. sigmoid(+inf) = 1, sigmoid(-inf) = 0, NaN stays NaN.
// - oar_tanhf: Cephes' odd polynomial below |x| = 0.625, else 1 - 2 / (exp(2|x|) + 1) with x's sign (|x|
//   clamped at 9, where tanh rounds to 1); max error 1.30 ulp; NaN propagates, ±inf gives ±1, ±0 stays ±0.
// - oar_erff: x P(x^2) for |x| <= 1 (degree 6 in x^2), else 1 - exp(-x^2) R(1/|x|) with x's sign (R degree 9,
//   erfc(x) e^(x^2) fitted in 1/x on [1/4, 1]), 1 above 3.92 where erf rounds to 1; both fits Chebyshev
//   interpolants made for this file. Max error 2 ulp (near 0: P's leading coefficient in float). NaN
//   propagates, ±inf gives ±1, ±0 stays ±0.
// - oar_sinf, oar_cosf: |x| = n pi/2 + r in double: below 2^28 pi/2 by rint(|x| 2/pi) and pi/2 in 25 + 53 bits
//   (fdlibm's medium case), above it Payne-Hanek: the float's 24-bit mantissa times a 96-bit window of 2/pi's
//   bits (a table of 32-bit words every 8 bits, oar_two_over_pi) gives n mod 4 and r in 64-bit fixed point;
//   then double polynomials of r (fdlibm's __sindf / __cosdf) and the quadrant's select. Max error 1 ulp
//   over the whole range; ±inf and NaN give NaN, sin(±0) = ±0. Branch-free: the table loads are gathers.
constexpr const char* kCPrelude = R"(static inline uint32_t oar_bits(float x) {
  union { float f; uint32_t u; } v = {x};
  return v.u;
}

static inline float oar_from_bits(uint32_t u) {
  union { uint32_t u; float f; } v = {u};
  return v.f;
}

/* a * b + c: one fused multiply-add where the target has it (-march=native defines __FMA__), else two
   roundings. Only the prelude's polynomials use it (kernels are compiled -ffp-contract=off). */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define OAR_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define OAR_FMA(a, b, c) ((a) * (b) + (c))
#endif

static inline float oar_expf(float x) {
  const float xc = x > 89.0f ? 89.0f : x; /* NaN stays NaN, and so does everything computed from it */
  const float t = OAR_FMA(xc, 1.44269504088896341f, 12582912.0f);
  const float fn = t - 12582912.0f;
  float r = OAR_FMA(fn, -0.693359375f, xc);
  r = OAR_FMA(fn, 2.12194440e-4f, r);
  float y = 1.3926213142e-3f;
  y = OAR_FMA(y, r, 8.3632031456e-3f);
  y = OAR_FMA(y, r, 4.1666556150e-2f);
  y = OAR_FMA(y, r, 1.6666576266e-1f);
  y = OAR_FMA(y, r, 0.5f);
  y = OAR_FMA(y, r, 1.0f);
  y = OAR_FMA(y, r, 1.0f);
  const int32_t n = (int32_t)(oar_bits(t) - 0x4b400000u), n1 = n >> 1;
  const float s1 = oar_from_bits((uint32_t)(n1 + 127) << 23), s2 = oar_from_bits((uint32_t)(n - n1 + 127) << 23);
  const float e = y * s1 * s2;
  return x < -104.0f ? 0.0f : e;
}

static inline float oar_logf(float x) {
  const bool sub = x < 1.17549435e-38f;
  const uint32_t u = oar_bits(sub ? x * 8388608.0f : x);
  int32_t e = (int32_t)((u >> 23) & 0xffu) - 126 - (sub ? 23 : 0);
  const float m = oar_from_bits((u & 0x007fffffu) | 0x3f000000u);
  const bool lo = m < 0.707106781186547524f;
  e = lo ? e - 1 : e;
  const float f = lo ? m + m - 1.0f : m - 1.0f;
  const float z = f * f;
  float y = 7.0376836292e-2f;
  y = y * f - 1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f - 1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f - 1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f - 2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z;
  const float fe = (float)e;
  y = y + fe * -2.12194440e-4f;
  y = y - 0.5f * z;
  float r = f + y;
  r = r + fe * 0.693359375f;
  r = x == 0.0f ? -INFINITY : r;
  r = x < 0.0f ? NAN : r;
  r = x == INFINITY ? x : r;
  return x != x ? x : r;
}

static inline float oar_log1pf(float x) {
  const float u = 1.0f + x;
  const float d = u - 1.0f;
  const float c = u == 0.0f ? 0.0f : (x - d) / u;
  float r = oar_logf(u) + c;
  r = d == 0.0f ? x : r;
  return x == INFINITY ? x : r;
}

static inline float oar_sigmoidf(float x) {
  const float e = oar_expf(-fabsf(x));
  const float r = 1.0f / (1.0f + e);
  return x < 0.0f ? e * r : r;
}

static inline float oar_tanhf(float x) {
  const float ax = fabsf(x), z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = x + x * z * p;
  const float e = oar_expf(2.0f * (ax > 9.0f ? 9.0f : ax));
  const float big = 1.0f - 2.0f / (e + 1.0f);
  return ax < 0.625f ? (ax == 0.0f ? x : small) : (x < 0.0f ? -big : big);
}

static inline float oar_erff(float x) {
  const float ax = fabsf(x), t = x * x;
  float p = 2.03882824e-4f;
  p = p * t - 1.17645448e-3f;
  p = p * t + 5.6098667e-3f;
  p = p * t - 2.70718485e-2f;
  p = p * t + 1.12886794e-1f;
  p = p * t - 3.76130611e-1f;
  p = p * t + 1.12837923f;
  const float small = x * p;
  const float s = 1.0f / (ax > 1.0f ? ax : 1.0f);
  float q = 2.50325426e-2f;
  q = q * s - 1.4789845e-1f;
  q = q * s + 3.60861868e-1f;
  q = q * s - 4.2983374e-1f;
  q = q * s + 1.45477355e-1f;
  q = q * s + 2.82589793e-1f;
  q = q * s - 3.94859582e-1f;
  q = q * s + 2.48475205e-2f;
  q = q * s + 5.61214626e-1f;
  q = q * s + 1.5165568e-4f;
  const float big = ax > 3.92f ? 1.0f : 1.0f - oar_expf(-t) * q;
  return ax <= 1.0f ? small : (x < 0.0f ? -big : big);
}

static const uint32_t oar_two_over_pi[21] = {0x517cc1b7u, 0x7cc1b727u, 0xc1b72722u, 0xb727220au, 0x27220a94u, 0x220a94feu, 0x0a94fe13u, 0x94fe13abu, 0xfe13abe8u, 0x13abe8fau, 0xabe8fa9au, 0xe8fa9a6eu, 0xfa9a6ee0u, 0x9a6ee06du, 0x6ee06db1u, 0xe06db14au, 0x6db14accu, 0xb14acc9eu, 0x4acc9e21u, 0xcc9e21c8u, 0x9e21c820u};

/* |x| = n pi/2 + r for a finite float ax = |x|: returns r, *n gets n (mod 4 is what counts). */
static inline double oar_rem_pio2f(float ax, int32_t* n) {
  const uint32_t u = oar_bits(ax);
  const bool big = u >= 0x4dc90fdbu;
  const double am = big ? 0.0 : (double)ax;
  const double fn = (am * 6.36619772367581382433e-01 + 6755399441055744.0) - 6755399441055744.0;
  const double r_med = (am - fn * 1.57079631090164184570e+00) - fn * 1.58932547735281966916e-08;
  int32_t e = (int32_t)((u >> 23) & 0xffu) - 150;
  e = e < 1 ? 1 : e > 104 ? 104 : e;
  const int32_t k = (e - 1) >> 3;
  const uint64_t m = (uint64_t)((u & 0x007fffffu) | 0x00800000u) << ((e - 1) & 7);
  const uint64_t p0 = m * oar_two_over_pi[k], p1 = m * oar_two_over_pi[k + 4], p2 = m * oar_two_over_pi[k + 8];
  const uint64_t hi = (p0 << 32) + p1 + (p2 >> 32);
  const uint64_t nb = (hi + ((uint64_t)1 << 61)) >> 62;
  const double r_big = (double)(int64_t)(hi - (nb << 62)) * (1.57079632679489661923 * 0x1p-62);
  *n = big ? (int32_t)nb : (int32_t)fn;
  return big ? r_big : r_med;
}

static inline double oar_sindf(double r) {
  const double z = r * r, w = z * z, p = -1.98393348360966317347e-4 + z * 2.7183114939898219064e-6, s = z * r;
  return (r + s * (-1.66666666416265235595e-1 + z * 8.3333293858894631756e-3)) + s * w * p;
}

static inline double oar_cosdf(double r) {
  const double z = r * r, w = z * z, p = -1.38867637746099294692e-3 + z * 2.43904487962774090654e-5;
  return ((1.0 + z * -4.99999997251031003120e-1) + w * 4.16666233237390631894e-2) + (w * z) * p;
}

static inline float oar_sinf(float x) {
  int32_t n;
  const double r = oar_rem_pio2f(fabsf(x), &n);
  const double s = oar_sindf(r), c = oar_cosdf(r);
  const int32_t q = n & 3;
  const double v = q == 0 ? s : q == 1 ? c : q == 2 ? -s : -c;
  const float f = (float)((oar_bits(x) >> 31) ? -v : v);
  return (oar_bits(x) & 0x7fffffffu) >= 0x7f800000u ? x - x : f;
}

static inline float oar_cosf(float x) {
  int32_t n;
  const double r = oar_rem_pio2f(fabsf(x), &n);
  const double s = oar_sindf(r), c = oar_cosdf(r);
  const int32_t q = n & 3;
  const float f = (float)(q == 0 ? c : q == 1 ? -s : q == 2 ? -c : s);
  return (oar_bits(x) & 0x7fffffffu) >= 0x7f800000u ? x - x : f;
}
)";

// Non-temporal stores of whole cache lines, for outputs larger than the last-level cache (the plugin's C
// compiler defines OAR_STREAM_MIN_BYTES, plugins/common/c_compiler.h): an ordinary store first reads the
// line it writes (read for ownership), so a kernel writing a large output moves its bytes twice. Compiler
// builtins rather than <immintrin.h>, whose parsing costs more (~0.2 s) than compiling a kernel; the widest
// the target has (-march=native). A line is built in a 64-byte aligned tile by the vectorised loop and
// written in one to four stores. The stores are weakly ordered: oar_stream_fence (sfence) runs before the
// kernel returns, so the launch's completion orders them before any later reader on any thread.
constexpr const char* kCStreamPrelude = R"(
#if defined(OAR_STREAM_MIN_BYTES) && OAR_STREAM_MIN_BYTES > 0 && defined(__SSE2__) && defined(__GNUC__)
#define OAR_STREAM 1
#if defined(__clang__)
typedef float oar_line_f32 __attribute__((vector_size(64), __may_alias__));
typedef double oar_line_f64 __attribute__((vector_size(64), __may_alias__));
static inline void oar_stream_f32(float* p, const float* t) { __builtin_nontemporal_store(*(const oar_line_f32*)t, (oar_line_f32*)p); }
static inline void oar_stream_f64(double* p, const double* t) { __builtin_nontemporal_store(*(const oar_line_f64*)t, (oar_line_f64*)p); }
#elif defined(__AVX512F__)
typedef float oar_v16sf __attribute__((vector_size(64), __may_alias__));
typedef double oar_v8df __attribute__((vector_size(64), __may_alias__));
static inline void oar_stream_f32(float* p, const float* t) { __builtin_ia32_movntps512(p, *(const oar_v16sf*)t); }
static inline void oar_stream_f64(double* p, const double* t) { __builtin_ia32_movntpd512(p, *(const oar_v8df*)t); }
#elif defined(__AVX__)
typedef float oar_v8sf __attribute__((vector_size(32), __may_alias__));
typedef double oar_v4df __attribute__((vector_size(32), __may_alias__));
static inline void oar_stream_f32(float* p, const float* t) {
  __builtin_ia32_movntps256(p, *(const oar_v8sf*)t);
  __builtin_ia32_movntps256(p + 8, *(const oar_v8sf*)(t + 8));
}
static inline void oar_stream_f64(double* p, const double* t) {
  __builtin_ia32_movntpd256(p, *(const oar_v4df*)t);
  __builtin_ia32_movntpd256(p + 4, *(const oar_v4df*)(t + 4));
}
#else
typedef float oar_v4sf __attribute__((vector_size(16), __may_alias__));
typedef double oar_v2df __attribute__((vector_size(16), __may_alias__));
static inline void oar_stream_f32(float* p, const float* t) {
  for (int k = 0; k < 16; k += 4) __builtin_ia32_movntps(p + k, *(const oar_v4sf*)(t + k));
}
static inline void oar_stream_f64(double* p, const double* t) {
  for (int k = 0; k < 8; k += 2) __builtin_ia32_movntpd(p + k, *(const oar_v2df*)(t + k));
}
#endif
static inline void oar_stream_fence(void) { __builtin_ia32_sfence(); }
#else
#define OAR_STREAM 0
#endif
)";

class Printer {
 public:
  // `pseudo`: PrintKernel's readable form (C syntax, loops marked with their kind).
  Printer(const Kernel& k, SourceDialect d, bool pseudo) : k_(k), d_(d), pseudo_(pseudo) {}

  std::string Source() {
    if (pseudo_) {
      Line(fmt::format("kernel {}({}) threads_per_task={}", k_.name, Signature(), k_.threads_per_task));
      Line("  tasks = " + E(k_.num_tasks));
      indent_ = 1;
      Body(k_.body);
      return out_.str();
    }
    if (d_ == SourceDialect::kC) {
      out_ << "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n\n" << kCPrelude << kCStreamPrelude;
      Line(fmt::format("void {}(void* const* args, int64_t task_begin, int64_t task_end) {{", k_.name));
      indent_ = 1;
      int a = 0;
      for (const KernelBuffer& b : k_.buffers) {
        const std::string t = Type(b.dtype, true);
        Line(b.output ? fmt::format("{}* restrict {} = *({}* const*)args[{}];", t, b.name, t, a)
                      : fmt::format("const {}* restrict {} = *(const {}* const*)args[{}];", t, b.name, t, a));
        ++a;
      }
      for (const std::string& p : k_.int_params) Line(fmt::format("const int64_t {} = *(const int64_t*)args[{}];", p, a++));
      Line(fmt::format("for (int64_t {} = task_begin; {} < task_end; ++{}) {{", k_.body->var, k_.body->var,
                       k_.body->var));
    } else if (Ocl()) {
      Line(fmt::format("__kernel void {}({}) {{", k_.name, Signature()));
      indent_ = 1;
      // OpenCL C wants __local variables at kernel function scope: every block reduction's buffer here.
      std::vector<std::string> locals;
      CollectReduceBuffers(k_.body, &locals);
      for (const std::string& l : locals) Line(l);
      Line(fmt::format("const long {} = get_group_id(0);", k_.body->var));
      Line("{");
    } else {
      if (d_ == SourceDialect::kHip) out_ << "#include <hip/hip_runtime.h>\n";
      Line(fmt::format("extern \"C\" __global__ void {}({}) {{", k_.name, Signature()));
      indent_ = 1;
      Line(fmt::format("const long long {} = blockIdx.x;", k_.body->var));
      Line("{");
    }
    ++indent_;
    for (const Stmt& s : k_.body->body) Body(s);
    --indent_;
    Line("}");
    if (streams_) {
      Line("#if OAR_STREAM");
      Line("oar_stream_fence();");
      Line("#endif");
    }
    indent_ = 0;
    Line("}");
    // float64 needs cl_khr_fp64 in OpenCL C 1.2 and 2.0.
    if (Ocl() && out_.str().find("double") != std::string::npos) {
      return "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + out_.str();
    }
    return out_.str();
  }

 private:
  // CUDA, HIP and OpenCL C: one block (work-group) per task, its threads (work-items) striding over kThreads loops.
  bool Gpu() const { return !pseudo_ && d_ != SourceDialect::kC; }
  bool Ocl() const { return !pseudo_ && d_ == SourceDialect::kOpenCL; }

  // The dialect's spellings of the block's thread index, block size and barrier.
  const char* ThreadIdx() const { return Ocl() ? "get_local_id(0)" : "threadIdx.x"; }
  const char* BlockDim() const { return Ocl() ? "get_local_size(0)" : "blockDim.x"; }
  const char* Barrier() const { return Ocl() ? "barrier(CLK_LOCAL_MEM_FENCE);" : "__syncthreads();"; }

  static std::string ReduceBuffer(const std::string& var) { return "oar_red_" + var; }

  // OpenCL: the `__local` declaration of each block reduction's buffer, once per name.
  void CollectReduceBuffers(const Stmt& s, std::vector<std::string>* out) const {
    if (s->op == StmtOp::kBlockReduce) {
      const std::string decl =
          fmt::format("__local {} {}[{}];", Type(s->dtype, true), ReduceBuffer(s->var), k_.threads_per_task);
      if (std::find(out->begin(), out->end(), decl) == out->end()) out->push_back(decl);
    }
    for (const Stmt& c : s->body) CollectReduceBuffers(c, out);
  }

  // `buffer`: the element type of a kernel argument (OpenCL C takes no bool pointer there: bytes instead). C
  // reads and writes bool buffers as bytes too: GCC 12 does not vectorise a loop that loads a `_Bool` (a causal
  // mask's select kept the attention softmax of every llama step scalar); the values stay 0 and 1, and each
  // converts to and from `bool` on load and store.
  std::string Type(DType t, bool buffer = false) const {
    if (!Gpu() && !pseudo_ && buffer && t == DType::kBool) return "uint8_t";
    if (Ocl()) {
      switch (t) {
        case DType::kInt64: return "long";
        case DType::kInt32: return "int";
        case DType::kInt8: return "char";
        case DType::kUInt8: return "uchar";
        case DType::kBool: return buffer ? "uchar" : "bool";
        default: break;
      }
    }
    if (Gpu()) {
      switch (t) {
        case DType::kInt64: return "long long";
        case DType::kInt32: return "int";
        case DType::kInt8: return "signed char";
        case DType::kUInt8: return "unsigned char";
        default: break;
      }
    }
    return CTypeName(t);
  }

  std::string Signature() const {
    std::string s;
    for (const KernelBuffer& b : k_.buffers) {
      if (!s.empty()) s += ", ";
      s += fmt::format("{}{}{}* {}{}", Ocl() ? "__global " : "", b.output ? "" : "const ", Type(b.dtype, true),
                       pseudo_ ? "" : Ocl() ? "restrict " : "__restrict__ ", b.name);
    }
    for (const std::string& p : k_.int_params) s += fmt::format(", {} {}", Type(DType::kInt64), p);
    return s;
  }

  const char* End() const { return pseudo_ ? "" : ";"; }

  void Line(const std::string& s) { out_ << std::string(static_cast<size_t>(indent_) * 2, ' ') << s << "\n"; }

  std::string Literal(double v, DType t) const {
    const bool f32 = t == DType::kFloat32;
    if (std::isnan(v)) return Gpu() ? (f32 ? "(0.0f / 0.0f)" : "(0.0 / 0.0)") : (f32 ? "NAN" : "((double)NAN)");
    if (std::isinf(v)) {
      const std::string inf = Gpu() ? (f32 ? "(1.0f / 0.0f)" : "(1.0 / 0.0)") : (f32 ? "INFINITY" : "((double)INFINITY)");
      return v < 0 ? "(-" + inf + ")" : inf;
    }
    std::string s = f32 ? fmt::format("{:.9g}", v) : fmt::format("{:.17g}", v);
    if (s.find_first_of(".eE") == std::string::npos) s += ".0";
    return f32 ? s + "f" : s;
  }

  std::string Fn(const char* name, DType t) const {  // OpenCL C's math built-ins are overloaded: no f suffix
    return t == DType::kFloat32 && !Ocl() ? std::string(name) + "f" : std::string(name);
  }

  std::string One(DType t) const { return Literal(1.0, t); }

  std::string Cast(const Expr& e) const {
    const DType to = e->dtype, from = e->args[0]->dtype;
    const std::string x = E(e->args[0]);
    if (to == DType::kBool) return "(" + x + " != 0)";
    if (IsFloat(from) && !IsFloat(to)) {  // truncate toward zero, saturate, NaN -> 0 (the cast op's rule)
      const char* hi = to == DType::kInt32 ? "2147483647" : to == DType::kInt64 ? "9223372036854775807" :
                       to == DType::kInt8 ? "127" : "255";
      const char* min64 = Ocl() ? "(-9223372036854775807L - 1)" : "(-9223372036854775807LL - 1)";
      const char* lo = to == DType::kInt32 ? "(-2147483647 - 1)" : to == DType::kInt64 ? min64 :
                       to == DType::kInt8 ? "(-128)" : "0";
      const std::string t = Type(to);
      return fmt::format("({0} != {0} ? ({1})0 : {0} >= ({2}){3} ? ({1}){3} : {0} <= ({2}){4} ? ({1}){4} : ({1}){0})", x,
                         t, Type(from), hi, lo);
    }
    return "((" + Type(to) + ")" + x + ")";
  }

  std::string E(const Expr& e) const {
    const auto a = [&](size_t i) { return E(e->args[i]); };
    const DType t = e->dtype;
    switch (e->op) {
      case ExprOp::kIntImm: {  // int64: OpenCL C's long is 64 bits and it has no long long
        const char* suffix = Ocl() ? "L" : "LL";
        return e->int_value < 0 ? fmt::format("({}{})", e->int_value, suffix)
                                : fmt::format("{}{}", e->int_value, suffix);
      }
      case ExprOp::kFloatImm: return Literal(e->float_value, t);
      case ExprOp::kVar: return lanes_.count(e->var) ? e->var + "[" + lane_var_ + "]" : e->var;
      case ExprOp::kLoad: return fmt::format("{}[{}]", k_.buffers[static_cast<size_t>(e->buffer)].name, a(0));
      case ExprOp::kNeg: return "(-" + a(0) + ")";
      case ExprOp::kExp: return (!Gpu() && t == DType::kFloat32 ? "oar_expf(" : Fn("exp", t) + "(") + a(0) + ")";
      case ExprOp::kLog: return (!Gpu() && t == DType::kFloat32 ? "oar_logf(" : Fn("log", t) + "(") + a(0) + ")";
      case ExprOp::kLog1p: return (!Gpu() && t == DType::kFloat32 ? "oar_log1pf(" : Fn("log1p", t) + "(") + a(0) + ")";
      case ExprOp::kSqrt: return Fn("sqrt", t) + "(" + a(0) + ")";
      case ExprOp::kRsqrt: return "(" + One(t) + " / " + Fn("sqrt", t) + "(" + a(0) + "))";
      case ExprOp::kSin: return (!Gpu() && t == DType::kFloat32 ? "oar_sinf(" : Fn("sin", t) + "(") + a(0) + ")";
      case ExprOp::kCos: return (!Gpu() && t == DType::kFloat32 ? "oar_cosf(" : Fn("cos", t) + "(") + a(0) + ")";
      case ExprOp::kTanh: return (!Gpu() && t == DType::kFloat32 ? "oar_tanhf(" : Fn("tanh", t) + "(") + a(0) + ")";
      case ExprOp::kErf: return (!Gpu() && t == DType::kFloat32 ? "oar_erff(" : Fn("erf", t) + "(") + a(0) + ")";
      case ExprOp::kSigmoid:
        if (!Gpu() && t == DType::kFloat32) return "oar_sigmoidf(" + a(0) + ")";
        return "(" + One(t) + " / (" + One(t) + " + " + Fn("exp", t) + "(-" + a(0) + ")))";
      case ExprOp::kReciprocal: return "(" + One(t) + " / " + a(0) + ")";
      case ExprOp::kAbs:
        return IsFloat(t) ? Fn("fabs", t) + "(" + a(0) + ")" : fmt::format("({0} < 0 ? -{0} : {0})", a(0));
      case ExprOp::kSign:  // -1, 0 or 1; NaN stays NaN
        return fmt::format("({0} > 0 ? ({1})1 : {0} < 0 ? ({1})-1 : {0})", a(0), Type(t));
      case ExprOp::kRelu: return fmt::format("({0} < 0 ? ({1})0 : {0})", a(0), Type(t));  // keeps NaN
      case ExprOp::kNot: return "(!" + a(0) + ")";
      case ExprOp::kIsNan: return fmt::format("({0} != {0})", a(0));
      case ExprOp::kIsInf: return fmt::format("({0} - {0} != {0} - {0} && {0} == {0})", a(0));
      case ExprOp::kAdd: return "(" + a(0) + " + " + a(1) + ")";
      case ExprOp::kSub: return "(" + a(0) + " - " + a(1) + ")";
      case ExprOp::kMul: return "(" + a(0) + " * " + a(1) + ")";
      case ExprOp::kDiv: return "(" + a(0) + " / " + a(1) + ")";
      case ExprOp::kMod: return "(" + a(0) + " % " + a(1) + ")";
      case ExprOp::kMax:  // NaN propagates
        return IsFloat(t) ? fmt::format("({0} > {1} || {0} != {0} ? {0} : {1})", a(0), a(1))
                          : fmt::format("({0} > {1} ? {0} : {1})", a(0), a(1));
      case ExprOp::kMin:
        return IsFloat(t) ? fmt::format("({0} < {1} || {0} != {0} ? {0} : {1})", a(0), a(1))
                          : fmt::format("({0} < {1} ? {0} : {1})", a(0), a(1));
      case ExprOp::kPow: return Fn("pow", t) + "(" + a(0) + ", " + a(1) + ")";
      case ExprOp::kEq: return "(" + a(0) + " == " + a(1) + ")";
      case ExprOp::kNe: return "(" + a(0) + " != " + a(1) + ")";
      case ExprOp::kLt: return "(" + a(0) + " < " + a(1) + ")";
      case ExprOp::kLe: return "(" + a(0) + " <= " + a(1) + ")";
      case ExprOp::kGt: return "(" + a(0) + " > " + a(1) + ")";
      case ExprOp::kGe: return "(" + a(0) + " >= " + a(1) + ")";
      case ExprOp::kAnd: return "(" + a(0) + " && " + a(1) + ")";
      case ExprOp::kOr: return "(" + a(0) + " || " + a(1) + ")";
      case ExprOp::kSelect: return "(" + a(0) + " ? " + a(1) + " : " + a(2) + ")";
      case ExprOp::kCast: return Cast(e);
    }
    return "?";
  }

  static const char* ReduceName(ReduceOp r) {
    switch (r) {
      case ReduceOp::kSum: return "+";
      case ReduceOp::kProd: return "*";
      case ReduceOp::kMax: return "max";
      case ReduceOp::kMin: return "min";
      case ReduceOp::kOr: return "||";
    }
    return "?";
  }

  std::string Combine(ReduceOp r, const std::string& a, const std::string& b) const {
    switch (r) {
      case ReduceOp::kSum: return a + " + " + b;
      case ReduceOp::kProd: return a + " * " + b;
      case ReduceOp::kMax: return fmt::format("({1} > {0} ? {1} : {0})", a, b);
      case ReduceOp::kMin: return fmt::format("({1} < {0} ? {1} : {0})", a, b);
      case ReduceOp::kOr: return a + " || " + b;
    }
    return "?";
  }

  // C: the column-reduce schedule's kThreads loop over a tile of columns holds serial loops down the rows
  // (the reduction passes). GCC vectorises no loop with inner loops, and walking each column down every row
  // before the next column misses the cache on every load, so the loop is distributed and interchanged: the
  // loop's own locals (accumulators, per-column values) become arrays over the tile's lanes, each run of
  // statements at its top level becomes its own simd loop over the lanes, and each serial nest keeps its
  // loops with the simd loop over the lanes innermost. Legal because lanes are independent (a lane reads
  // only what it wrote: its column of every output). The lane count's bound is the extent's constant
  // operand (min(tile, columns left)); 0 (no interchange) for any other loop.
  static int64_t LaneBound(const StmtNode& s) {
    if (s.loop != LoopKind::kThreads || s.extent->op != ExprOp::kMin) return 0;
    bool nest = false;
    for (const Stmt& c : s.body) nest = nest || c->op == StmtOp::kFor;
    if (!nest) return 0;
    for (const Expr& a : s.extent->args) {
      if (a->op == ExprOp::kIntImm && a->int_value > 0 && a->int_value <= 1024) return a->int_value;
    }
    return 0;
  }

  // Whether a serial nest is a chain of loops ending in a body of plain statements (how Lower builds each
  // pass down the reduced dimensions); only those are interchanged.
  static bool PlainNest(const StmtNode& s) {
    if (s.op != StmtOp::kFor || s.loop != LoopKind::kSerial) return false;
    if (s.body.size() == 1 && s.body[0]->op == StmtOp::kFor) return PlainNest(*s.body[0]);
    for (const Stmt& c : s.body) {
      if (c->op != StmtOp::kLocal && c->op != StmtOp::kAssign && c->op != StmtOp::kStore) return false;
    }
    return true;
  }

  void LaneLoop(const std::string& extent, const std::vector<Stmt>& stmts) {
    Line("#pragma omp simd");
    Line(fmt::format("for (int64_t {0} = 0; {0} < {1}; ++{0}) {{", lane_var_, extent));
    ++indent_;
    for (const Stmt& c : stmts) {
      if (c->op == StmtOp::kLocal && lanes_.count(c->var)) {
        Line(fmt::format("{}[{}] = {};", c->var, lane_var_, E(c->value)));
      } else {
        Body(c);
      }
    }
    --indent_;
    Line("}");
  }

  void LaneNest(const std::string& extent, const StmtNode& loop) {
    Line(fmt::format("for (int64_t {0} = 0; {0} < {1}; ++{0}) {{", loop.var, E(loop.extent)));
    ++indent_;
    if (loop.body.size() == 1 && loop.body[0]->op == StmtOp::kFor) {
      LaneNest(extent, *loop.body[0]);
    } else {
      LaneLoop(extent, loop.body);
    }
    --indent_;
    Line("}");
  }

  bool InterchangeColumns(const StmtNode& s) {
    const int64_t bound = LaneBound(s);
    if (bound == 0 || !lanes_.empty()) return false;
    for (const Stmt& c : s.body) {
      if (c->op == StmtOp::kFor ? !PlainNest(*c) : c->op != StmtOp::kLocal && c->op != StmtOp::kStore) return false;
    }
    Line("{");
    ++indent_;
    const std::string extent = "oar_lanes_" + s.var;
    Line(fmt::format("const int64_t {} = {};", extent, E(s.extent)));
    for (const Stmt& c : s.body) {
      if (c->op != StmtOp::kLocal) continue;
      Line(fmt::format("{} {}[{}];", Type(c->dtype), c->var, bound));
      lanes_.insert(c->var);
    }
    lane_var_ = s.var;
    std::vector<Stmt> run;
    for (const Stmt& c : s.body) {
      if (c->op != StmtOp::kFor) {
        run.push_back(c);
        continue;
      }
      if (!run.empty()) LaneLoop(extent, run);
      run.clear();
      LaneNest(extent, *c);
    }
    if (!run.empty()) LaneLoop(extent, run);
    lanes_.clear();
    --indent_;
    Line("}");
    return true;
  }

  // C: a final pass (a kThreads loop of locals and stores, no reduction) whose stores write a row of an
  // output at row + j is split into an ordinary head up to the first streamed row's 64-byte boundary,
  // whole cache lines computed into tiles and streamed (oar_stream_f32/f64), and an ordinary tail; at run
  // time, when the launch writes at least OAR_STREAM_MIN_BYTES through these stores and every streamed row
  // starts at the same offset within a line (else the whole row is the head). Each element is computed by
  // the same expressions in every part, so the values are the same bits as with ordinary stores. A buffer
  // the loop also loads (softmax's stashed exponentials, re-read in place) keeps its ordinary stores: its
  // lines are in the cache already. The streamed stores share one element size (the first's).
  // In a row reduction the first reduction pass reads the row from memory and the final pass from the
  // cache; the hardware prefetcher, seeing no reads of that stream during the final pass, does not run
  // ahead into the next row, so reads and writes would take turns. Each line of the streamed part
  // prefetches (into L2: a layer_norm row, its weight and bias already fill L1) the same line of the next
  // row (row + extent, the next task's row when the input is contiguous; any other address is only a
  // wasted prefetch) of every input an earlier reduction pass of the task read. Measured on [4096, 4096],
  // 2 threads (PERFORMANCE.md): RMSNorm 3.8-4.0 -> 3.1-3.5 ms, layer_norm 4.2-4.3 -> 3.6-3.7 ms.
  struct Streamed {
    int buffer;
    Expr row;  ///< the offset of the row's element 0
  };

  static bool Uses(const Expr& e, const std::string& var) {
    if (e->op == ExprOp::kVar && e->var == var) return true;
    return std::any_of(e->args.begin(), e->args.end(), [&](const Expr& a) { return Uses(a, var); });
  }

  static void CollectLoads(const Expr& e, std::set<int>* out) {
    if (e->op == ExprOp::kLoad) out->insert(e->buffer);
    for (const Expr& a : e->args) CollectLoads(a, out);
  }

  // `off` as row + var with row free of var, or nothing.
  static std::optional<Expr> RowStart(const Expr& off, const std::string& var) {
    const auto is_var = [&](const Expr& e) { return e->op == ExprOp::kVar && e->var == var; };
    if (is_var(off)) return IntImm(0);
    if (off->op != ExprOp::kAdd) return std::nullopt;
    if (is_var(off->args[1]) && !Uses(off->args[0], var)) return off->args[0];
    if (is_var(off->args[0]) && !Uses(off->args[1], var)) return off->args[1];
    return std::nullopt;
  }

  std::vector<Streamed> StreamableStores(const StmtNode& s) const {
    if (pseudo_ || Gpu() || s.loop != LoopKind::kThreads || !s.reductions.empty() || !lanes_.empty()) return {};
    std::set<int> loaded, stored, stored_twice;
    for (const Stmt& c : s.body) {
      if (c->op != StmtOp::kLocal && c->op != StmtOp::kStore) return {};
      CollectLoads(c->value, &loaded);
      if (c->op == StmtOp::kStore) {
        CollectLoads(c->offset, &loaded);
        if (!stored.insert(c->buffer).second) stored_twice.insert(c->buffer);
      }
    }
    std::vector<Streamed> out;
    for (const Stmt& c : s.body) {
      if (c->op != StmtOp::kStore || loaded.count(c->buffer) || stored_twice.count(c->buffer)) continue;
      const KernelBuffer& b = k_.buffers[static_cast<size_t>(c->buffer)];
      if (!b.output || !IsFloat(b.dtype)) continue;
      if (!out.empty() && b.dtype != k_.buffers[static_cast<size_t>(out[0].buffer)].dtype) continue;
      if (const std::optional<Expr> row = RowStart(c->offset, s.var)) out.push_back({c->buffer, *row});
    }
    return out;
  }

  // The inputs the loop reads along its row (row + j) that an earlier reduction pass of the task read too.
  std::vector<Streamed> NextRowLoads(const StmtNode& s) const {
    std::vector<Streamed> out;
    std::set<int> seen;
    std::function<void(const Expr&)> visit = [&](const Expr& e) {
      if (e->op == ExprOp::kLoad && reduced_loads_.count(e->buffer) && !seen.count(e->buffer)) {
        if (const std::optional<Expr> row = RowStart(e->args[0], s.var)) {
          seen.insert(e->buffer);
          out.push_back({e->buffer, *row});
        }
      }
      for (const Expr& a : e->args) visit(a);
    };
    for (const Stmt& c : s.body) visit(c->value);
    return out;
  }

  bool StreamLoop(const StmtNode& s) {
    const std::vector<Streamed> st = StreamableStores(s);
    if (st.empty()) return false;
    streams_ = true;
    const std::string& j = s.var;
    const DType dt = k_.buffers[static_cast<size_t>(st[0].buffer)].dtype;
    const int64_t size = dt == DType::kFloat32 ? 4 : 8, lanes = 64 / size;
    const std::string n = "oar_n_" + j, a = "oar_a_" + j, b = "oar_b_" + j, p = "oar_p_" + j;
    const auto row_ptr = [&](const Streamed& x) {
      return fmt::format("({} + {})", k_.buffers[static_cast<size_t>(x.buffer)].name, E(x.row));
    };
    const auto plain = [&](const std::string& from, const std::string& to) {
      Line("#pragma omp simd");
      Line(fmt::format("for (int64_t {0} = {1}; {0} < {2}; ++{0}) {{", j, from, to));
      ++indent_;
      for (const Stmt& c : s.body) Body(c);
      --indent_;
      Line("}");
    };
    Line("{");
    ++indent_;
    Line(fmt::format("const int64_t {} = {};", n, E(s.extent)));
    Line(fmt::format("int64_t {} = {}, {} = {};", a, n, b, n));  // [a, b): whole lines, streamed
    Line("#if OAR_STREAM");
    Line(fmt::format("if ((double)({}) * (double){} * {}.0 >= (double)OAR_STREAM_MIN_BYTES) {{", E(k_.num_tasks), n,
                     size * static_cast<int64_t>(st.size())));
    ++indent_;
    Line(fmt::format("const uintptr_t {} = (uintptr_t){};", p, row_ptr(st[0])));
    std::string same = fmt::format("{} % {} == 0", p, size);
    for (size_t i = 1; i < st.size(); ++i) same += fmt::format(" && (uintptr_t){} % 64 == {} % 64", row_ptr(st[i]), p);
    Line(fmt::format("if ({}) {{", same));
    Line(fmt::format("  const int64_t oar_h = (int64_t)((64 - {} % 64) % 64 / {});", p, size));
    Line(fmt::format("  {} = oar_h < {} ? oar_h : {};", a, n, n));
    Line(fmt::format("  {} = {} + ({} - {}) / {} * {};", b, a, n, a, lanes, lanes));
    Line("}");
    --indent_;
    Line("}");
    Line("#endif");
    plain("0", a);
    Line("#if OAR_STREAM");
    const std::string line = "oar_line_" + j;
    Line(fmt::format("for (int64_t {0} = {1}; {0} < {2}; {0} += {3}) {{", line, a, b, lanes));
    ++indent_;
    for (const Streamed& x : st) {
      const std::string tile = fmt::format("oar_tile_{}_{}", j, x.buffer);
      Line(fmt::format("{} {}[{}] __attribute__((aligned(64)));", Type(dt), tile, lanes));
      tiles_[x.buffer] = tile;
    }
    tile_index_ = fmt::format("{} - {}", j, line);
    Line("#pragma omp simd");
    Line(fmt::format("for (int64_t {0} = {1}; {0} < {1} + {2}; ++{0}) {{", j, line, lanes));
    ++indent_;
    for (const Stmt& c : s.body) Body(c);
    --indent_;
    Line("}");
    for (const Streamed& x : st) {
      Line(fmt::format("oar_stream_{}({} + {}, {});", dt == DType::kFloat32 ? "f32" : "f64", row_ptr(x), line,
                       tiles_.at(x.buffer)));
    }
    for (const Streamed& x : NextRowLoads(s)) {
      const int64_t in_size = static_cast<int64_t>(DTypeSize(k_.buffers[static_cast<size_t>(x.buffer)].dtype));
      for (int64_t off = 0; off < std::max<int64_t>(1, lanes * in_size / 64); ++off) {
        Line(fmt::format("__builtin_prefetch((const void*)((uintptr_t)({}) + (uintptr_t)({} + {}) * {}u + {}u), 0, 2);",
                         row_ptr(x), n, line, in_size, off * 64));
      }
    }
    tiles_.clear();
    --indent_;
    Line("}");
    Line("#endif");
    plain(b, n);
    --indent_;
    Line("}");
    return true;
  }

  void Body(const Stmt& s) {
    switch (s->op) {
      case StmtOp::kSeq:
        for (const Stmt& c : s->body) Body(c);
        return;
      case StmtOp::kFor: {
        if (!pseudo_ && !Gpu() && (InterchangeColumns(*s) || StreamLoop(*s))) return;
        if (pseudo_) {
          const char* kind = s->loop == LoopKind::kTask ? "task" : s->loop == LoopKind::kThreads ? "threads" : "serial";
          std::string red;
          for (const auto& [v, r] : s->reductions) red += fmt::format(" reduce({}:{})", ReduceName(r), v);
          Line(fmt::format("for {} in {}({}){}:", s->var, kind, E(s->extent), red));
        } else if (Gpu() && s->loop == LoopKind::kThreads) {
          Line(fmt::format("for ({0} {1} = {2}; {1} < {3}; {1} += {4}) {{", Type(DType::kInt64), s->var, ThreadIdx(),
                           E(s->extent), BlockDim()));
        } else {
          if (!Gpu() && s->loop == LoopKind::kThreads) {
            if (!s->reductions.empty()) {  // StreamLoop's prefetches: what the reduction passes read
              for (const Stmt& c : s->body) {
                if (c->value) CollectLoads(c->value, &reduced_loads_);
              }
            }
            std::string pragma = "#pragma omp simd";
            for (const auto& [v, r] : s->reductions) pragma += fmt::format(" reduction({}:{})", ReduceName(r), v);
            Line(pragma);
          }
          const std::string t = Type(DType::kInt64);
          Line(fmt::format("for ({0} {1} = 0; {1} < {2}; ++{1}) {{", t, s->var, E(s->extent)));
        }
        ++indent_;
        for (const Stmt& c : s->body) Body(c);
        --indent_;
        if (!pseudo_) Line("}");
        return;
      }
      case StmtOp::kLocal:
        Line(fmt::format("{} {} = {}{}", Type(s->dtype), s->var, E(s->value), End()));
        return;
      case StmtOp::kAssign:
        Line(fmt::format("{} = {}{}", lanes_.count(s->var) ? s->var + "[" + lane_var_ + "]" : s->var, E(s->value),
                         End()));
        return;
      case StmtOp::kStore:
        if (auto t = tiles_.find(s->buffer); t != tiles_.end()) {  // StreamLoop: into the line's tile
          Line(fmt::format("{}[{}] = {};", t->second, tile_index_, E(s->value)));
          return;
        }
        Line(fmt::format("{}[{}] = {}{}", k_.buffers[static_cast<size_t>(s->buffer)].name, E(s->offset), E(s->value),
                         End()));
        return;
      case StmtOp::kBlockReduce:
        if (pseudo_) {
          Line(fmt::format("block_reduce({}:{})", ReduceName(s->reduce), s->var));
        } else if (Gpu()) {
          const std::string buf = ReduceBuffer(s->var), tid = ThreadIdx();
          Line("{");
          ++indent_;
          // OpenCL: declared at kernel scope (CollectReduceBuffers).
          if (!Ocl()) Line(fmt::format("__shared__ {} {}[{}];", Type(s->dtype), buf, k_.threads_per_task));
          Line(fmt::format("{}[{}] = {};", buf, tid, s->var));
          Line(Barrier());
          Line(fmt::format("for (unsigned oar_s = {} / 2; oar_s > 0; oar_s >>= 1) {{", BlockDim()));
          Line(fmt::format("  if ({1} < oar_s) {0}[{1}] = {2};", buf, tid,
                           Combine(s->reduce, buf + "[" + tid + "]", buf + "[" + tid + " + oar_s]")));
          Line(std::string("  ") + Barrier());
          Line("}");
          Line(fmt::format("{} = {}[0];", s->var, buf));
          Line(Barrier());
          --indent_;
          Line("}");
        }
        return;  // C: the loop was serial, the local holds the whole reduction
      case StmtOp::kSingle:
        if (pseudo_) {
          Line("single:");
        } else if (Gpu()) {
          Line(fmt::format("if ({} == 0) {{", ThreadIdx()));
        } else {
          Line("{");
        }
        ++indent_;
        for (const Stmt& c : s->body) Body(c);
        --indent_;
        if (!pseudo_) Line("}");
        return;
    }
  }

  const Kernel& k_;
  SourceDialect d_;
  bool pseudo_;
  int indent_ = 0;
  std::ostringstream out_;
  std::set<std::string> lanes_;  // InterchangeColumns: the locals that are arrays over the lanes
  std::string lane_var_;
  std::map<int, std::string> tiles_;  // StreamLoop: buffer -> the tile its stores write
  std::string tile_index_;            // StreamLoop: an element's index in its tile
  bool streams_ = false;              // some loop streams: fence before returning
  std::set<int> reduced_loads_;       // the buffers the reduction passes emitted so far load
};

}  // namespace

std::string GenerateSource(const Kernel& k, SourceDialect dialect) { return Printer(k, dialect, false).Source(); }

std::string PrintKernel(const Kernel& k) { return Printer(k, SourceDialect::kC, true).Source(); }

}  // namespace oar::compiler
