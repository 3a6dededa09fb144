// Elementwise kernels: every input is already broadcast to the output's shape (stride 0 on broadcast
// dims), operand strides come in OarEwLayout (inputs first, the output last).

#define BINARY(name, S, expr)                                                                    \
  __kernel void name##_##S(__global const T_##S* a, __global const T_##S* b, __global T_##S* out, \
                           OarEwLayout L) {                                                      \
    GRID_LOOP(i, L.n) {                                                                          \
      long off[3];                                                                               \
      EwOffsets(&L, i, 3, off);                                                                  \
      const float x = LD_##S(a, off[0]);                                                         \
      const float y = LD_##S(b, off[1]);                                                         \
      ST_##S(out, off[2], (expr));                                                               \
    }                                                                                            \
  }

#define UNARY(name, S, expr)                                                                      \
  __kernel void name##_##S(__global const T_##S* a, __global T_##S* out, OarEwLayout L) {         \
    GRID_LOOP(i, L.n) {                                                                           \
      long off[2];                                                                                \
      EwOffsets(&L, i, 2, off);                                                                   \
      const float x = LD_##S(a, off[0]);                                                          \
      ST_##S(out, off[1], (expr));                                                                \
    }                                                                                             \
  }

#define COMPARE(name, S, expr)                                                                    \
  __kernel void name##_##S(__global const T_##S* a, __global const T_##S* b, __global uchar* out, \
                           OarEwLayout L) {                                                       \
    GRID_LOOP(i, L.n) {                                                                           \
      long off[3];                                                                                \
      EwOffsets(&L, i, 3, off);                                                                   \
      const float x = LD_##S(a, off[0]);                                                          \
      const float y = LD_##S(b, off[1]);                                                          \
      out[off[2]] = (expr) ? 1 : 0;                                                               \
    }                                                                                             \
  }

OAR_INLINE float Sigmoid(float x) {
  const float e = exp(-fabs(x));  // never overflows
  return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
OAR_INLINE float Sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }  // keeps -0.0, NaN

#define FLOAT_ELEMENTWISE(S)                               \
  BINARY(add, S, x + y)                                    \
  BINARY(sub, S, x - y)                                    \
  BINARY(mul, S, x * y)                                    \
  BINARY(div, S, x / y)                                    \
  BINARY(maximum, S, MaxNan(x, y))                         \
  BINARY(minimum, S, MinNan(x, y))                         \
  BINARY(pow, S, pow(x, y))                                \
  BINARY(relu_grad, S, x * (y > 0.0f ? 1.0f : 0.0f))       \
  UNARY(neg, S, -x)                                        \
  UNARY(exp, S, exp(x))                                    \
  UNARY(relu, S, x < 0.0f ? 0.0f : x)                      \
  UNARY(abs, S, fabs(x))                                   \
  UNARY(sign, S, Sign(x))                                  \
  UNARY(log, S, log(x))                                    \
  UNARY(log1p, S, log1p(x))                                \
  UNARY(sqrt, S, sqrt(x))                                  \
  UNARY(rsqrt, S, 1.0f / sqrt(x))                          \
  UNARY(sin, S, sin(x))                                    \
  UNARY(cos, S, cos(x))                                    \
  UNARY(tanh, S, tanh(x))                                  \
  UNARY(sigmoid, S, Sigmoid(x))                            \
  UNARY(erf, S, erf(x))                                    \
  UNARY(reciprocal, S, 1.0f / x)                           \
  COMPARE(eq, S, x == y)                                   \
  COMPARE(ne, S, x != y)                                   \
  COMPARE(lt, S, x < y)                                    \
  COMPARE(le, S, x <= y)                                   \
  COMPARE(gt, S, x > y)                                    \
  COMPARE(ge, S, x >= y)

FLOAT_ELEMENTWISE(f32)
FLOAT_ELEMENTWISE(f16)

// ---- integers (I32, I64): two's-complement wraparound, no traps --------------------------------------

#define IBINARY(name, S, expr)                                                                    \
  __kernel void name##_##S(__global const T_##S* a, __global const T_##S* b, __global T_##S* out, \
                           OarEwLayout L) {                                                      \
    GRID_LOOP(i, L.n) {                                                                          \
      long off[3];                                                                               \
      EwOffsets(&L, i, 3, off);                                                                  \
      const T_##S x = a[off[0]];                                                                 \
      const T_##S y = b[off[1]];                                                                 \
      out[off[2]] = (expr);                                                                      \
    }                                                                                            \
  }

#define IUNARY(name, S, expr)                                                                     \
  __kernel void name##_##S(__global const T_##S* a, __global T_##S* out, OarEwLayout L) {         \
    GRID_LOOP(i, L.n) {                                                                           \
      long off[2];                                                                                \
      EwOffsets(&L, i, 2, off);                                                                   \
      const T_##S x = a[off[0]];                                                                  \
      out[off[1]] = (expr);                                                                       \
    }                                                                                             \
  }

#define ICOMPARE(name, S, expr)                                                                   \
  __kernel void name##_##S(__global const T_##S* a, __global const T_##S* b, __global uchar* out, \
                           OarEwLayout L) {                                                       \
    GRID_LOOP(i, L.n) {                                                                           \
      long off[3];                                                                                \
      EwOffsets(&L, i, 3, off);                                                                   \
      const T_##S x = a[off[0]];                                                                  \
      const T_##S y = b[off[1]];                                                                  \
      out[off[2]] = (expr) ? 1 : 0;                                                               \
    }                                                                                             \
  }

#define WRAP(S, expr) ((T_##S)(expr))
#define INT_ELEMENTWISE(S)                                               \
  IBINARY(add, S, WRAP(S, (U_##S)x + (U_##S)y))                          \
  IBINARY(sub, S, WRAP(S, (U_##S)x - (U_##S)y))                          \
  IBINARY(mul, S, WRAP(S, (U_##S)x * (U_##S)y))                          \
  IBINARY(maximum, S, x > y ? x : y)                                     \
  IBINARY(minimum, S, x < y ? x : y)                                     \
  IUNARY(neg, S, WRAP(S, (U_##S)0 - (U_##S)x))                           \
  IUNARY(abs, S, x < 0 ? WRAP(S, (U_##S)0 - (U_##S)x) : x)               \
  IUNARY(relu, S, x < 0 ? (T_##S)0 : x)                                  \
  IUNARY(sign, S, (T_##S)((x > 0) - (x < 0)))                            \
  ICOMPARE(eq, S, x == y)                                                \
  ICOMPARE(ne, S, x != y)                                                \
  ICOMPARE(lt, S, x < y)                                                 \
  ICOMPARE(le, S, x <= y)                                                \
  ICOMPARE(gt, S, x > y)                                                 \
  ICOMPARE(ge, S, x >= y)

INT_ELEMENTWISE(i32)
INT_ELEMENTWISE(i64)

// ---- ops that move bits: copy (strided output), where, fill ----------------------------------------

#define BIT_KERNELS(W)                                                                                \
  __kernel void copy_##W(__global const T_##W* x, __global T_##W* out, OarEwLayout L) {              \
    GRID_LOOP(i, L.n) {                                                                               \
      long off[2];                                                                                    \
      EwOffsets(&L, i, 2, off);                                                                       \
      out[off[1]] = x[off[0]];                                                                        \
    }                                                                                                 \
  }                                                                                                   \
  __kernel void where_##W(__global const uchar* cond, __global const T_##W* a, __global const T_##W* b, \
                          __global T_##W* out, OarEwLayout L) {                                       \
    GRID_LOOP(i, L.n) {                                                                               \
      long off[4];                                                                                    \
      EwOffsets(&L, i, 4, off);                                                                       \
      out[off[3]] = cond[off[0]] ? a[off[1]] : b[off[2]];                                             \
    }                                                                                                 \
  }                                                                                                   \
  __kernel void fill_##W(__global T_##W* out, long n, T_##W value) {                                  \
    GRID_LOOP(i, n) out[i] = value;                                                                   \
  }

BIT_KERNELS(x8)
BIT_KERNELS(x16)
BIT_KERNELS(x32)
BIT_KERNELS(x64)
