// IR programs that the interpreter's and the executor's tests both run (jit::Interpret is the executor's
// oracle): one text each, so the two suites exercise the same program.
#ifndef OAR_CORE_SCHEDULER_TESTING_PROGRAMS_H_
#define OAR_CORE_SCHEDULER_TESTING_PROGRAMS_H_

namespace oar::scheduler::test_programs {

// The spiral MLP's forward (examples/ir/mlp.oir without its deliberate redundancies) with a float64 tail
// (no kunlun_sim kernel: it falls back to the cpu).
inline constexpr const char* kMlp = R"(builtin.module() ({
  %x = builtin.data() {name = "x", index = 0} : () -> tensor<[B, 2], f32>
  %w1 = builtin.parameter() {name = "w1"} : () -> tensor<[2, 32], f32>
  %b1 = builtin.parameter() {name = "b1"} : () -> tensor<[32], f32>
  %w2 = builtin.parameter() {name = "w2"} : () -> tensor<[32, 2], f32>
  %h0 = op.matmul(%x, %w1) : (tensor<[B, 2], f32>, tensor<[2, 32], f32>) -> tensor<[B, 32], f32>
  %h1 = op.add(%h0, %b1) : (tensor<[B, 32], f32>, tensor<[32], f32>) -> tensor<[B, 32], f32>
  %h = op.tanh(%h1) : (tensor<[B, 32], f32>) -> tensor<[B, 32], f32>
  %o = op.matmul(%h, %w2) : (tensor<[B, 32], f32>, tensor<[32, 2], f32>) -> tensor<[B, 2], f32>
  %p = op.softmax(%o) : (tensor<[B, 2], f32>) -> tensor<[B, 2], f32>
  %f64 = op.cast(%p) {dtype = f64} : (tensor<[B, 2], f32>) -> tensor<[B, 2], f64>
  %logp = op.log(%f64) : (tensor<[B, 2], f64>) -> tensor<[B, 2], f64>
  %t = op.permute(%logp) {dims = [1, 0]} : (tensor<[B, 2], f64>) -> tensor<[2, B], f64>
  builtin.output(%p, %t) : (tensor<[B, 2], f32>, tensor<[2, B], f64>) -> ()
}) : () -> ()
)";

// Sum 1 + 2 + ... while the total stays below the input `limit`; then negate it if the input `flag` is set.
inline constexpr const char* kControlFlow = R"(builtin.module() ({
  %limit = builtin.data() {name = "limit", index = 0} : () -> tensor<[], f32>
  %flag = builtin.data() {name = "flag", index = 1} : () -> tensor<[], i1>
  %zero = builtin.constant() {value = [0.0]} : () -> tensor<[], f32>
  %total, %i = cf.while(%zero, %zero) ({
  ^bb(%t: tensor<[], f32>, %k: tensor<[], f32>):
    %go = op.lt(%t, %limit) : (tensor<[], f32>, tensor<[], f32>) -> tensor<[], i1>
    cf.condition(%go, %t, %k) : (tensor<[], i1>, tensor<[], f32>, tensor<[], f32>) -> ()
  }, {
  ^bb(%t2: tensor<[], f32>, %k2: tensor<[], f32>):
    %one = builtin.constant() {value = [1.0]} : () -> tensor<[], f32>
    %k3 = op.add(%k2, %one) : (tensor<[], f32>, tensor<[], f32>) -> tensor<[], f32>
    %t3 = op.add(%t2, %k3) : (tensor<[], f32>, tensor<[], f32>) -> tensor<[], f32>
    cf.yield(%t3, %k3) : (tensor<[], f32>, tensor<[], f32>) -> ()
  }) : (tensor<[], f32>, tensor<[], f32>) -> (tensor<[], f32>, tensor<[], f32>)
  %r = cf.if(%flag) ({
    %n = op.neg(%total) : (tensor<[], f32>) -> tensor<[], f32>
    cf.yield(%n) : (tensor<[], f32>) -> ()
  }, {
    cf.yield(%total) : (tensor<[], f32>) -> ()
  }) : (tensor<[], i1>) -> tensor<[], f32>
  builtin.output(%r, %i) : (tensor<[], f32>, tensor<[], f32>) -> ()
}) : () -> ()
)";

}  // namespace oar::scheduler::test_programs

#endif  // OAR_CORE_SCHEDULER_TESTING_PROGRAMS_H_
