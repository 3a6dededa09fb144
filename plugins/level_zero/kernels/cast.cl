// cast between F32, F16, I32, I64 and BOOL following docs/ops.md: float -> integer truncates toward
// zero and saturates with NaN -> 0 (exactly the _sat_rtz conversions), integer -> integer wraps,
// integer -> float rounds to nearest even, anything -> BOOL is `x != 0` (NaN -> true).

// Load the source as its compute value: floats as float, integers and bool as long.
#define CLASS_f32 F
#define CLASS_f16 F
#define CLASS_i32 I
#define CLASS_i64 I
#define CLASS_b8 I
#define T_b8 uchar
#define LD_i32(p, i) ((long)(p)[i])
#define LD_i64(p, i) ((p)[i])
#define LD_b8(p, i) ((long)((p)[i] != 0))

// Store a float value (F) or a long value (I) into each destination type.
#define STF_f32(p, i, v) ((p)[i] = (v))
#define STF_f16(p, i, v) ((p)[i] = FloatToHalf(v))
#define STF_i32(p, i, v) ((p)[i] = convert_int_sat_rtz(v))
#define STF_i64(p, i, v) ((p)[i] = convert_long_sat_rtz(v))
#define STF_b8(p, i, v) ((p)[i] = ((v) != 0.0f) ? 1 : 0)
#define STI_f32(p, i, v) ((p)[i] = convert_float_rte(v))
#define STI_f16(p, i, v) ((p)[i] = FloatToHalf(convert_float_rte(v)))
#define STI_i32(p, i, v) ((p)[i] = (int)(uint)(ulong)(v))
#define STI_i64(p, i, v) ((p)[i] = (v))
#define STI_b8(p, i, v) ((p)[i] = ((v) != 0) ? 1 : 0)

#define CAST_WITH(S, D, CLS)                                                                 \
  __kernel void cast_##S##_##D(__global const T_##S* x, __global T_##D* out, OarEwLayout L) { \
    GRID_LOOP(i, L.n) {                                                                      \
      long off[2];                                                                           \
      EwOffsets(&L, i, 2, off);                                                              \
      ST##CLS##_##D(out, off[1], LD_##S(x, off[0]));                                         \
    }                                                                                        \
  }
#define CAST_EXPAND(S, D, CLS) CAST_WITH(S, D, CLS)
#define CAST(S, D) CAST_EXPAND(S, D, CLASS_##S)

#define CAST_FROM(S) CAST(S, f32) CAST(S, f16) CAST(S, i32) CAST(S, i64) CAST(S, b8)
CAST_FROM(f32)
CAST_FROM(f16)
CAST_FROM(i32)
CAST_FROM(i64)
CAST_FROM(b8)
