// Reductions (sum, mean, max, min) and softmax / log_softmax: one work-group of OAR_L0_REDUCE_GROUP
// items per output element (per row for softmax). Each item walks a strided share of the set with a
// compensated (Kahan) running sum, then the group combines the partials in a local-memory tree, so the
// error stays near float32 precision without a single long running total.

// Tree-combine `v` across the work-group; every item gets the result. `OP(a, b)` combines two values.
#define GROUP_COMBINE(scratch, v, OP)                                  \
  do {                                                                 \
    const int lid_ = get_local_id(0);                                  \
    scratch[lid_] = (v);                                               \
    barrier(CLK_LOCAL_MEM_FENCE);                                      \
    for (int half_ = OAR_L0_REDUCE_GROUP / 2; half_ > 0; half_ /= 2) {  \
      if (lid_ < half_) scratch[lid_] = OP(scratch[lid_], scratch[lid_ + half_]); \
      barrier(CLK_LOCAL_MEM_FENCE);                                    \
    }                                                                  \
    (v) = scratch[0];                                                  \
    barrier(CLK_LOCAL_MEM_FENCE);                                      \
  } while (0)

#define ADD2(a, b) ((a) + (b))

OAR_INLINE long KeptBase(const OarReduceLayout* L, long g) {
  return StridedOffset(g, L->kept_rank, L->kept_shape, L->kept_stride);
}

// kind: 0 sum, 1 mean, 2 max, 3 min.
#define REDUCE(name, S, kind)                                                                     \
  __kernel __attribute__((reqd_work_group_size(OAR_L0_REDUCE_GROUP, 1, 1))) void name##_##S(      \
      __global const T_##S* x, __global T_##S* out, OarReduceLayout L) {                          \
    __local float scratch[OAR_L0_REDUCE_GROUP];                                                   \
    for (long g = get_group_id(0); g < L.outputs; g += get_num_groups(0)) {                       \
      const long base = KeptBase(&L, g);                                                          \
      float acc = (kind) == 2 ? -INFINITY : ((kind) == 3 ? INFINITY : 0.0f);                      \
      float comp = 0.0f;                                                                          \
      for (long j = get_local_id(0); j < L.count; j += OAR_L0_REDUCE_GROUP) {                     \
        const float v = LD_##S(x, base + StridedOffset(j, L.red_rank, L.red_shape, L.red_stride)); \
        if ((kind) == 2) {                                                                        \
          acc = MaxNan(acc, v);                                                                   \
        } else if ((kind) == 3) {                                                                 \
          acc = MinNan(acc, v);                                                                   \
        } else {                                                                                  \
          const float y = v - comp;                                                               \
          const float t = acc + y;                                                                \
          comp = (t - acc) - y;                                                                   \
          acc = t;                                                                                \
        }                                                                                         \
      }                                                                                           \
      if ((kind) == 2) {                                                                          \
        GROUP_COMBINE(scratch, acc, MaxNan);                                                      \
      } else if ((kind) == 3) {                                                                   \
        GROUP_COMBINE(scratch, acc, MinNan);                                                      \
      } else {                                                                                    \
        GROUP_COMBINE(scratch, acc, ADD2);                                                        \
      }                                                                                           \
      if ((kind) == 1) acc = acc / (float)L.count; /* 0 / 0 = NaN for an empty set */             \
      if (get_local_id(0) == 0) ST_##S(out, g, acc);                                              \
    }                                                                                             \
  }

// is_log: 0 softmax, 1 log_softmax. NaN anywhere, a +inf maximum or an all -inf row give NaN (as torch).
#define SOFTMAX(name, S, is_log)                                                                   \
  __kernel __attribute__((reqd_work_group_size(OAR_L0_REDUCE_GROUP, 1, 1))) void name##_##S(      \
      __global const T_##S* x, __global T_##S* out, OarRowLayout L) {                             \
    __local float scratch[OAR_L0_REDUCE_GROUP];                                                   \
    for (long r = get_group_id(0); r < L.rows; r += get_num_groups(0)) {                          \
      const long xb = StridedOffset(r, L.outer_rank, L.outer_shape, L.x_outer_stride);            \
      const long ob = StridedOffset(r, L.outer_rank, L.outer_shape, L.out_outer_stride);          \
      float m = -INFINITY;                                                                        \
      for (long j = get_local_id(0); j < L.n; j += OAR_L0_REDUCE_GROUP) {                         \
        m = MaxNan(m, LD_##S(x, xb + j * L.x_axis_stride));                                       \
      }                                                                                           \
      GROUP_COMBINE(scratch, m, MaxNan);                                                          \
      float s = 0.0f, comp = 0.0f;                                                                \
      for (long j = get_local_id(0); j < L.n; j += OAR_L0_REDUCE_GROUP) {                         \
        const float y = exp(LD_##S(x, xb + j * L.x_axis_stride) - m) - comp;                      \
        const float t = s + y;                                                                    \
        comp = (t - s) - y;                                                                       \
        s = t;                                                                                    \
      }                                                                                           \
      GROUP_COMBINE(scratch, s, ADD2);                                                            \
      const float ls = log(s);                                                                    \
      for (long j = get_local_id(0); j < L.n; j += OAR_L0_REDUCE_GROUP) {                         \
        const float d = LD_##S(x, xb + j * L.x_axis_stride) - m;                                  \
        ST_##S(out, ob + j * L.out_axis_stride, (is_log) ? d - ls : exp(d) / s);                     \
      }                                                                                           \
    }                                                                                             \
  }

#define REDUCTIONS(S)          \
  REDUCE(sum, S, 0)            \
  REDUCE(mean, S, 1)           \
  REDUCE(max, S, 2)            \
  REDUCE(min, S, 3)            \
  SOFTMAX(softmax, S, 0)       \
  SOFTMAX(log_softmax, S, 1)

REDUCTIONS(f32)
REDUCTIONS(f16)
