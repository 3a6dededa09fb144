#include "core/distributed/mesh.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <set>

#include "core/base/error.h"

namespace oar::distributed {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> SplitTop(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '(' || s[i] == '[') ++depth;
    if (s[i] == ')' || s[i] == ']') --depth;
    if (s[i] == sep && depth == 0) {
      out.push_back(Trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  out.push_back(Trim(s.substr(start)));
  return out;
}

bool ParseInt(std::string_view s, int64_t& v) {
  s = Trim(s);
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

const char* ReduceName(runtime::ReduceOp op) {
  switch (op) {
    case runtime::ReduceOp::kSum:
      return "sum";
    case runtime::ReduceOp::kAvg:
      return "avg";
    case runtime::ReduceOp::kMax:
      return "max";
    case runtime::ReduceOp::kMin:
      return "min";
    case runtime::ReduceOp::kProd:
      return "prod";
  }
  return "?";
}

}  // namespace

ProcessMesh::ProcessMesh(std::vector<int64_t> shape, std::vector<std::string> dim_names, std::vector<Device> devices)
    : ProcessMesh(std::move(shape), std::move(dim_names), std::move(devices), false) {}

ProcessMesh::ProcessMesh(std::vector<int64_t> shape, std::vector<std::string> dim_names, std::vector<Device> devices,
                         bool per_process)
    : shape_(std::move(shape)), dim_names_(std::move(dim_names)), devices_(std::move(devices)) {
  OAR_CHECK_ARG(!shape_.empty(), "ProcessMesh: the shape is empty");
  OAR_CHECK_ARG(dim_names_.size() == shape_.size(), "ProcessMesh: {} dim names for a {}-d mesh", dim_names_.size(),
                shape_.size());
  int64_t n = 1;
  std::set<std::string> names;
  for (size_t i = 0; i < shape_.size(); ++i) {
    OAR_CHECK_ARG(shape_[i] >= 1, "ProcessMesh: dim '{}' has size {}; sizes must be >= 1", dim_names_[i], shape_[i]);
    OAR_CHECK_ARG(!dim_names_[i].empty() && names.insert(dim_names_[i]).second,
                  "ProcessMesh: dim names must be distinct and non-empty; got '{}' at dim {}", dim_names_[i], i);
    n *= shape_[i];
  }
  OAR_CHECK_ARG(static_cast<int64_t>(devices_.size()) == n, "ProcessMesh: a mesh of {} ranks got {} devices", n,
                devices_.size());
  std::set<int> seen;
  for (const Device& d : devices_) {
    OAR_CHECK_ARG(d.type() == devices_[0].type(), "ProcessMesh: every device must be of one type; got {} and {}",
                  devices_[0].str(), d.str());
    OAR_CHECK_ARG(per_process || seen.insert(d.index()).second, "ProcessMesh: device {} appears twice", d.str());
  }
}

void ProcessMesh::ParseSpec(std::string_view spec, std::vector<int64_t>& shape, std::vector<std::string>& names) {
  shape.clear();
  names.clear();
  OAR_CHECK_ARG(!Trim(spec).empty(), "--mesh: expected 'name=size[,name=size...]' (e.g. dp=2,tp=2), got ''");
  for (std::string_view part : SplitTop(spec, ',')) {
    const size_t eq = part.find('=');
    int64_t size = 0;
    OAR_CHECK_ARG(eq != std::string_view::npos && !Trim(part.substr(0, eq)).empty() &&
                      ParseInt(part.substr(eq + 1), size) && size >= 1,
                  "--mesh: expected 'name=size' with a size >= 1 (e.g. dp=2,tp=2), got '{}' in '{}'", part, spec);
    names.emplace_back(Trim(part.substr(0, eq)));
    shape.push_back(size);
  }
}

ProcessMesh ProcessMesh::Parse(std::string_view spec, std::string_view device_type) {
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  ParseSpec(spec, shape, names);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<Device> devices;
  for (int64_t i = 0; i < n; ++i) devices.emplace_back(device_type, static_cast<int>(i));
  return ProcessMesh(std::move(shape), std::move(names), std::move(devices));
}

ProcessMesh ProcessMesh::ForProcesses(std::string_view spec, Device device, int64_t rank, int64_t world_size) {
  std::vector<int64_t> shape;
  std::vector<std::string> names;
  ParseSpec(spec, shape, names);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  OAR_CHECK_ARG(n == world_size, "--mesh {}: {} ranks, but the launcher started {} processes (one rank per process)",
                spec, n, world_size);
  OAR_CHECK_ARG(rank >= 0 && rank < n, "ProcessMesh: process rank {} is outside the mesh of {}", rank, n);
  ProcessMesh m(std::move(shape), std::move(names), std::vector<Device>(static_cast<size_t>(n), device), true);
  m.local_rank_ = rank;
  return m;
}

ProcessMesh ProcessMesh::Slice(int dim, int64_t coord) const {
  OAR_CHECK_ARG(ndim() >= 2 && dim >= 0 && dim < ndim() && coord >= 0 && coord < size(dim),
                "ProcessMesh::Slice: dim {} at {} of the mesh {}: needs a mesh of 2 or more dims, a dim and a "
                "coordinate in range",
                dim, coord, ToString());
  std::vector<int64_t> shape = shape_;
  std::vector<std::string> names = dim_names_;
  shape.erase(shape.begin() + dim);
  names.erase(names.begin() + dim);
  std::vector<Device> devices;
  std::vector<int> processes;
  int64_t local = multi_process() ? kNoRank : kEveryRank;
  for (int64_t r = 0; r < numel(); ++r) {
    if (Coord(r)[static_cast<size_t>(dim)] != coord) continue;
    if (multi_process() && r == local_rank_) local = static_cast<int64_t>(devices.size());
    devices.push_back(devices_[static_cast<size_t>(r)]);
    processes.push_back(process_rank(r));
  }
  ProcessMesh m(std::move(shape), std::move(names), std::move(devices), multi_process());
  m.local_rank_ = local;
  if (multi_process()) m.process_ranks_ = std::move(processes);
  return m;
}

int ProcessMesh::DimIndex(std::string_view name) const {
  for (size_t i = 0; i < dim_names_.size(); ++i) {
    if (dim_names_[i] == name) return static_cast<int>(i);
  }
  std::string known;
  for (const std::string& n : dim_names_) known += (known.empty() ? "" : ", ") + n;
  Throw(ErrorCode::kNotFound, "ProcessMesh: no dim named '{}'; the mesh has {}", name, known);
}

std::vector<int64_t> ProcessMesh::Coord(int64_t rank) const {
  std::vector<int64_t> c(shape_.size());
  for (int i = ndim() - 1; i >= 0; --i) {
    c[static_cast<size_t>(i)] = rank % shape_[static_cast<size_t>(i)];
    rank /= shape_[static_cast<size_t>(i)];
  }
  return c;
}

int64_t ProcessMesh::Rank(const std::vector<int64_t>& coord) const {
  int64_t r = 0;
  for (size_t i = 0; i < shape_.size(); ++i) r = r * shape_[i] + coord[i];
  return r;
}

std::vector<int64_t> ProcessMesh::GroupAlong(int64_t rank, int dim) const {
  std::vector<int64_t> c = Coord(rank), out;
  for (int64_t i = 0; i < size(dim); ++i) {
    c[static_cast<size_t>(dim)] = i;
    out.push_back(Rank(c));
  }
  return out;
}

std::string ProcessMesh::ToString() const {
  std::string s;
  for (size_t i = 0; i < shape_.size(); ++i) s += (i ? "," : "") + dim_names_[i] + "=" + std::to_string(shape_[i]);
  if (multi_process()) {
    s += " over " + std::to_string(devices_.size()) + " processes (" +
         (local_rank_ >= 0 ? "this one rank " + std::to_string(local_rank_) : std::string("none of them this one")) +
         " on " + devices_.front().str() + ")";
  } else if (!devices_.empty()) {
    s += " over " + devices_.front().str();
    if (devices_.size() > 1) s += ".." + std::to_string(devices_.back().index());
  }
  return s;
}

bool operator<(const Placement& a, const Placement& b) {
  if (a.kind != b.kind) return a.kind < b.kind;
  if (a.kind == Placement::Kind::kShard) return a.dim != b.dim ? a.dim < b.dim : a.split < b.split;
  if (a.kind == Placement::Kind::kPartial) return a.reduce < b.reduce;
  return false;
}

std::string Placement::ToString() const {
  switch (kind) {
    case Kind::kReplicate:
      return "R";
    case Kind::kShard:
      return "S(" + std::to_string(dim) + (split > 1 ? "," + std::to_string(split) : std::string()) + ")";
    case Kind::kPartial:
      return std::string("P(") + ReduceName(reduce) + ")";
  }
  return "?";
}

std::string PlacementsString(const Placements& p) {
  std::string s = "[";
  for (size_t i = 0; i < p.size(); ++i) s += (i ? ", " : "") + p[i].ToString();
  return s + "]";
}

Placements ParsePlacements(std::string_view text) {
  text = Trim(text);
  if (!text.empty() && text.front() == '[' && text.back() == ']') text = Trim(text.substr(1, text.size() - 2));
  Placements out;
  for (std::string_view part : SplitTop(text, ',')) {
    const size_t open = part.find('(');
    const std::string_view head = Trim(part.substr(0, open));
    std::string_view arg;
    if (open != std::string_view::npos) {
      OAR_CHECK_ARG(part.back() == ')', "placements: unbalanced parenthesis in '{}'", part);
      arg = Trim(part.substr(open + 1, part.size() - open - 2));
    }
    if (head == "R" || head == "Replicate") {
      out.push_back(Placement::Replicate());
    } else if (head == "S" || head == "Shard") {
      int64_t d = 0, k = 1;
      const size_t comma = arg.find(',');
      OAR_CHECK_ARG(ParseInt(arg.substr(0, comma), d) &&
                        (comma == std::string_view::npos || (ParseInt(arg.substr(comma + 1), k) && k >= 1)),
                    "placements: Shard needs a tensor dim and optionally a split >= 1, e.g. S(0) or S(0,3); got '{}'",
                    part);
      out.push_back(Placement::Shard(d, k));
    } else if (head == "P" || head == "Partial") {
      runtime::ReduceOp op = runtime::ReduceOp::kSum;
      if (arg == "avg") {
        op = runtime::ReduceOp::kAvg;
      } else if (arg == "max") {
        op = runtime::ReduceOp::kMax;
      } else if (arg == "min") {
        op = runtime::ReduceOp::kMin;
      } else {
        OAR_CHECK_ARG(arg.empty() || arg == "sum", "placements: Partial takes sum, avg, max or min; got '{}'", part);
      }
      out.push_back(Placement::Partial(op));
    } else {
      Throw(ErrorCode::kInvalidArgument, "placements: expected R, S(dim) or P(sum|avg|max|min), got '{}'", part);
    }
  }
  return out;
}

Placements CheckPlacements(const ProcessMesh& mesh, const Placements& p, int64_t tensor_rank, std::string_view where,
                           const Dims* global) {
  OAR_CHECK_ARG(static_cast<int>(p.size()) == mesh.ndim(), "{}: {} placements {} for a {}-d mesh ({})", where,
                p.size(), PlacementsString(p), mesh.ndim(), mesh.ToString());
  Placements out = p;
  const Placement* first_partial = nullptr;
  for (Placement& x : out) {
    if (x.is_partial()) {
      OAR_CHECK_ARG(first_partial == nullptr || first_partial->reduce == x.reduce,
                    "{}: {} mixes partial reductions; every Partial mesh dim of one tensor must use the same one",
                    where, PlacementsString(p));
      if (first_partial == nullptr) first_partial = &x;
    }
    if (x.is_shard()) {
      const int64_t d = x.dim < 0 ? x.dim + tensor_rank : x.dim;
      OAR_CHECK_ARG(d >= 0 && d < tensor_rank, "{}: {} names a dim outside a rank-{} tensor", where, x.ToString(),
                    tensor_rank);
      x.dim = d;
      OAR_CHECK_ARG(x.split >= 1, "{}: {} has a split below 1", where, x.ToString());
      if (global != nullptr) {
        OAR_CHECK_ARG((*global)[static_cast<int>(d)] % x.split == 0,
                      "{}: {} splits dim {} of shape {} into {} chunks, which do not divide it", where, x.ToString(),
                      d, global->ToString(), x.split);
      }
    }
    if (x.is_partial()) {
      OAR_CHECK_ARG(x.reduce != runtime::ReduceOp::kProd, "{}: Partial(prod) is not supported (sum, avg, max, min)",
                    where);
    }
  }
  for (size_t a = 0; a < out.size(); ++a) {
    for (size_t b = 0; b < out.size(); ++b) {
      OAR_CHECK_ARG(a == b || !out[a].is_strided() || !out[b].is_shard(out[a].dim),
                    "{}: {} shards dim {} strided on mesh dim {} and again on mesh dim {}; a strided dim takes one "
                    "mesh dim", where, PlacementsString(out), out[a].dim, a, b);
    }
  }
  return out;
}

int64_t ShardSize(int64_t n, int64_t parts, int64_t i) { return n / parts + (i < n % parts ? 1 : 0); }
int64_t ShardOffset(int64_t n, int64_t parts, int64_t i) { return i * (n / parts) + std::min(i, n % parts); }

LocalRegion RegionOf(const ProcessMesh& mesh, const Placements& p, const Dims& global, int64_t rank) {
  LocalRegion r{Dims::Filled(global.size(), 0), global};
  const std::vector<int64_t> c = mesh.Coord(rank);
  for (int m = 0; m < mesh.ndim(); ++m) {  // lower mesh dims split first (outer)
    if (!p[static_cast<size_t>(m)].is_shard()) continue;
    const int d = static_cast<int>(p[static_cast<size_t>(m)].dim);
    const int64_t k = p[static_cast<size_t>(m)].split, n = r.shape[d] / k, parts = mesh.size(m),
                  i = c[static_cast<size_t>(m)];
    r.offset[d] += ShardOffset(n, parts, i);
    r.shape[d] = k * ShardSize(n, parts, i);
  }
  return r;
}

}  // namespace oar::distributed
