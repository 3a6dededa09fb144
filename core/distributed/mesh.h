// ProcessMesh and Placements: how a distributed tensor is laid out over devices.
//
// A ProcessMesh arranges devices of one type in an n-dimensional grid with a name per dimension
// ("dp=2,tp=2": 2 × 2, device r at coordinate (r / 2, r % 2), row-major). A tensor's Placements hold one
// Placement per mesh dimension: Replicate (every device along that mesh dim holds the same values),
// Shard(d) (tensor dim d is split along that mesh dim) or Partial(op) (the global value is op over the
// devices along that mesh dim: sum, avg, max, min).
//
// Uneven splits — the one rule: Shard(d) over a mesh dim of size p gives device i of that dim
// n / p + (i < n % p ? 1 : 0) elements of tensor dim d (the first n % p devices hold one more; Paddle's
// BalancedSplit), starting at i * (n / p) + min(i, n % p). A device may hold zero elements (n < p).
// When several mesh dims shard one tensor dim, the lower mesh dim splits first and each higher one
// splits the piece it is given (the lower mesh dim is the outer one).
//
// Strided shards (torch's _StridedShard): Shard(d, k) views tensor dim d of n elements as k chunks of n / k
// and splits every chunk by the rule above; device i holds its piece of each chunk, the k pieces in chunk
// order. A fused projection's output [.., 3 · heads · head_dim] sharded by heads is Shard(-1, 3): each rank
// holds its heads' q, k and v. k must divide n, and no other mesh dim may shard dim d as well.
#ifndef OAR_CORE_DISTRIBUTED_MESH_H_
#define OAR_CORE_DISTRIBUTED_MESH_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/runtime/ccl.h"
#include "core/tensor/device.h"
#include "core/tensor/dims.h"

namespace oar::distributed {

class ProcessMesh {
 public:
  ProcessMesh() = default;
  /// `devices` row-major over `shape`, one name per dim (distinct, non-empty). Throws kInvalidArgument
  /// when the device count differs from the product of `shape`, a dim is < 1, names repeat or devices
  /// repeat or differ in type.
  ProcessMesh(std::vector<int64_t> shape, std::vector<std::string> dim_names, std::vector<Device> devices);
  /// Parse "dp=2,tp=2" over devices `type`:0 .. `type`:(n-1) — every rank of the mesh in this process.
  static ProcessMesh Parse(std::string_view spec, std::string_view device_type);
  /// One rank per process (mpirun and other launchers): "dp=2,tp=2" over the processes of the job, mesh
  /// rank r = process rank r, this process being `rank` on `device` (every rank's device is its own
  /// process's; devices() lists `device` for each). Only the local rank holds a tensor; collectives along
  /// a mesh dim go through the process group of that dim's processes. Throws kInvalidArgument unless
  /// the mesh has `world_size` ranks and 0 <= rank < world_size.
  static ProcessMesh ForProcesses(std::string_view spec, Device device, int64_t rank, int64_t world_size);
  /// The ranks at coordinate `coord` of mesh dim `dim`, as a mesh of the other dims (their names, shape and
  /// order; rank order kept): stage s's tensor-parallel ranks are Slice(pp, s). With one rank per process,
  /// each rank stays in its process (process_rank) and this process holds its rank of the slice, or none
  /// when it is not in it. Throws kInvalidArgument for a 1-d mesh or a coordinate out of range.
  ProcessMesh Slice(int dim, int64_t coord) const;
  /// Parse only the shape and names of "dp=2,tp=2".
  static void ParseSpec(std::string_view spec, std::vector<int64_t>& shape, std::vector<std::string>& names);

  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size(int dim) const { return shape_.at(static_cast<size_t>(dim)); }
  const std::vector<std::string>& dim_names() const { return dim_names_; }
  /// The mesh dim called `name`; throws kNotFound listing the names.
  int DimIndex(std::string_view name) const;
  /// Number of devices (ranks).
  int64_t numel() const { return static_cast<int64_t>(devices_.size()); }
  const std::vector<Device>& devices() const { return devices_; }
  /// The coordinate of rank r (row-major).
  std::vector<int64_t> Coord(int64_t rank) const;
  /// The rank at coordinate `coord`.
  int64_t Rank(const std::vector<int64_t>& coord) const;
  /// The ranks that differ from `rank` only along mesh dim `dim`, in coordinate order (rank's group on it).
  std::vector<int64_t> GroupAlong(int64_t rank, int dim) const;
  /// "dp=2,tp=2 over kunlun_sim:0..3" ("dp=2,tp=2 over 4 processes (this one rank 1 on cpu:0)").
  std::string ToString() const;

  /// Whether each rank is its own process (ForProcesses) rather than every rank in this one.
  bool multi_process() const { return local_rank_ != kEveryRank; }
  /// Whether this process holds rank r's tensors (every rank in one process; only its own otherwise).
  bool is_local(int64_t r) const { return local_rank_ == kEveryRank || r == local_rank_; }
  /// The first rank this process holds (0 in one process).
  int64_t first_local() const { return local_rank_ < 0 ? 0 : local_rank_; }
  /// With one rank per process: the (world) process rank of mesh rank r — r itself for ForProcesses, the
  /// parent mesh's rank for a Slice. Collectives along a mesh dim go through these processes.
  int process_rank(int64_t r) const {
    return process_ranks_.empty() ? static_cast<int>(r) : process_ranks_.at(static_cast<size_t>(r));
  }

  friend bool operator==(const ProcessMesh& a, const ProcessMesh& b) {
    return a.shape_ == b.shape_ && a.dim_names_ == b.dim_names_ && a.devices_ == b.devices_ &&
           a.local_rank_ == b.local_rank_ && a.process_ranks_ == b.process_ranks_;
  }

 private:
  ProcessMesh(std::vector<int64_t> shape, std::vector<std::string> dim_names, std::vector<Device> devices,
              bool per_process);

  std::vector<int64_t> shape_;
  std::vector<std::string> dim_names_;
  std::vector<Device> devices_;
  static constexpr int64_t kEveryRank = -1, kNoRank = -2;
  int64_t local_rank_ = kEveryRank;  // one rank per process: this process's rank (kNoRank: none of them)
  std::vector<int> process_ranks_;   // one rank per process: rank r's process (empty: r)
};

/// How a tensor is laid out along one mesh dim.
struct Placement {
  enum class Kind { kReplicate, kShard, kPartial };
  Kind kind = Kind::kReplicate;
  int64_t dim = 0;                                  // kShard: the tensor dim
  runtime::ReduceOp reduce = runtime::ReduceOp::kSum;  // kPartial: kSum, kAvg, kMax or kMin
  int64_t split = 1;                                // kShard: the dim's chunks, each split alike (1: plain)

  static Placement Replicate() { return {}; }
  /// Shard(d): dim d split in balanced pieces; Shard(d, k): each of its k equal chunks split so (strided).
  static Placement Shard(int64_t d, int64_t k = 1) { return {Kind::kShard, d, runtime::ReduceOp::kSum, k}; }
  static Placement Partial(runtime::ReduceOp op = runtime::ReduceOp::kSum) { return {Kind::kPartial, 0, op}; }

  bool is_replicate() const { return kind == Kind::kReplicate; }
  bool is_shard() const { return kind == Kind::kShard; }
  bool is_shard(int64_t d) const { return kind == Kind::kShard && dim == d; }
  bool is_partial() const { return kind == Kind::kPartial; }
  bool is_strided() const { return kind == Kind::kShard && split > 1; }
  /// "R", "S(1)", "S(0,3)" (strided), "P(sum)".
  std::string ToString() const;

  friend bool operator==(const Placement& a, const Placement& b) {
    if (a.kind != b.kind) return false;
    if (a.kind == Kind::kShard) return a.dim == b.dim && a.split == b.split;
    if (a.kind == Kind::kPartial) return a.reduce == b.reduce;
    return true;
  }
  friend bool operator<(const Placement& a, const Placement& b);
};

/// One Placement per mesh dim.
using Placements = std::vector<Placement>;

/// "[S(0), R]".
std::string PlacementsString(const Placements& p);
/// Parse "S(0),R,P(sum)" (also "Shard(0)", "S(0,3)", "Replicate", "Partial(avg)").
Placements ParsePlacements(std::string_view text);

/// Throws kInvalidArgument unless `p` has one entry per mesh dim, shard dims are in [0, rank) (negative
/// dims are normalised), partial reductions are sum, avg, max or min and a strided dim is sharded by no other
/// mesh dim. Returns the normalised copy. With `global` given, also that a strided split divides its dim.
Placements CheckPlacements(const ProcessMesh& mesh, const Placements& p, int64_t tensor_rank, std::string_view where,
                           const Dims* global = nullptr);

/// Size and offset of piece `i` of `n` elements split over `parts` (the balanced rule above).
int64_t ShardSize(int64_t n, int64_t parts, int64_t i);
int64_t ShardOffset(int64_t n, int64_t parts, int64_t i);

/// The block of the global tensor that rank `rank` holds: per tensor dim its offset and its extent. A strided
/// dim (Shard(d, k)) is no block: its extent is the k pieces', its offset the piece's within each chunk.
struct LocalRegion {
  Dims offset, shape;
};
LocalRegion RegionOf(const ProcessMesh& mesh, const Placements& p, const Dims& global, int64_t rank);

}  // namespace oar::distributed

#endif  // OAR_CORE_DISTRIBUTED_MESH_H_
