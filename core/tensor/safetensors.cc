#include "core/tensor/safetensors.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/base/error.h"
#include "core/base/files.h"
#include "core/base/json.h"

namespace oar {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

std::string_view SafetensorsDType(DType t) {
  switch (t) {
    case DType::kFloat32: return "F32";
    case DType::kFloat64: return "F64";
    case DType::kFloat16: return "F16";
    case DType::kBFloat16: return "BF16";
    case DType::kInt8: return "I8";
    case DType::kUInt8: return "U8";
    case DType::kInt32: return "I32";
    case DType::kInt64: return "I64";
    case DType::kBool: return "BOOL";
    default: return "";
  }
}

DType FromSafetensorsDType(const std::string& s) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
                  DType::kUInt8, DType::kInt32, DType::kInt64, DType::kBool}) {
    if (SafetensorsDType(t) == s) return t;
  }
  return DType::kInvalid;
}

}  // namespace

void WriteSafetensors(const std::filesystem::path& path, std::span<const SafetensorsRecord> records,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsRecord& r : records) {
    OAR_CHECK_ARG(!r.name.empty() && r.name != "__metadata__",
                  "safetensors: invalid tensor name '{}' for {}", r.name, path.string());
    OAR_CHECK_ARG(!header.contains(r.name), "safetensors: duplicate tensor name '{}' for {}", r.name,
                  path.string());
    const std::string_view dtype = SafetensorsDType(r.dtype);
    OAR_CHECK_ARG(!dtype.empty(), "safetensors: tensor '{}' has an invalid dtype", r.name);
    const uint64_t expected = static_cast<uint64_t>(r.shape.Product()) * DTypeSize(r.dtype);
    OAR_CHECK_ARG(expected == r.nbytes, "safetensors: tensor '{}' of shape {} {} needs {} bytes, got {}",
                  r.name, r.shape.ToString(), DTypeName(r.dtype), expected, r.nbytes);
    header[r.name] = {{"dtype", dtype},
                      {"shape", std::vector<int64_t>(r.shape.begin(), r.shape.end())},
                      {"data_offsets", {offset, offset + r.nbytes}}};
    offset += r.nbytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');  // keep the data section 8-byte aligned
  const uint64_t n = text.size();
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(n >> (8 * i));

  // Written beside the target and renamed over it only when complete and on stable storage; a failed
  // write removes its temporary file.
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  try {
    DurableFile out(tmp, "safetensors");
    out.Write(std::as_bytes(std::span(length)));
    out.Write(text);
    for (const SafetensorsRecord& r : records) out.Write(std::span(r.data, r.nbytes));
    out.Commit();
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    OAR_CHECK(!ec, kDataLoss, "safetensors: cannot move {} to {}: {}", tmp.string(), path.string(), ec.message());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  const std::filesystem::path dir = path.parent_path();
  SyncDirectory(dir.empty() ? "." : dir, "safetensors");
}

SafetensorsFile SafetensorsFile::Read(const std::filesystem::path& path) {
  return Parse(ReadFileBytes(path, "safetensors"), path.string());
}

SafetensorsFile SafetensorsFile::Parse(std::vector<std::byte> bytes, const std::string& origin) {
  SafetensorsFile file;
  file.origin_ = origin;
  file.bytes_ = std::move(bytes);
  const size_t size = file.bytes_.size();
  OAR_CHECK(size >= 8, kDataLoss, "safetensors: {} is {} bytes long, shorter than the 8-byte header length",
            origin, size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file.bytes_[i]);
  OAR_CHECK(n <= kMaxHeaderBytes && n <= size - 8, kDataLoss,
            "safetensors: {} declares a {}-byte header but the file has {} bytes after the length", origin,
            n, size - 8);
  const char* header_begin = reinterpret_cast<const char*>(file.bytes_.data()) + 8;
  std::string problem;
  const std::optional<nlohmann::json> parsed = ParseJson(std::string_view(header_begin, n), &problem);
  OAR_CHECK(parsed && parsed->is_object(), kDataLoss, "safetensors: the header of {} is not a JSON object ({})",
            origin, parsed ? fmt::format("it is {}", BriefJson(*parsed)) : problem);
  const nlohmann::json& header = *parsed;
  const std::byte* data = file.bytes_.data() + 8 + n;
  const uint64_t data_size = size - 8 - n;

  // Names and values come from the file: every one is quoted in bounded form (BriefText, BriefJson).
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string name = BriefText(it.key());
    const nlohmann::json& entry = it.value();
    if (it.key() == "__metadata__") {
      OAR_CHECK(entry.is_object(), kDataLoss, "safetensors: {}: __metadata__ is {}, not an object", origin,
                BriefJson(entry));
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        OAR_CHECK(m.value().is_string(), kDataLoss, "safetensors: {}: metadata '{}' is {}, not a string", origin,
                  BriefText(m.key()), BriefJson(m.value()));
        file.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    OAR_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                  entry.contains("data_offsets"),
              kDataLoss, "safetensors: {}: entry '{}' lacks dtype, shape or data_offsets", origin, name);
    const nlohmann::json& jd = entry["dtype"];
    const DType dtype = jd.is_string() ? FromSafetensorsDType(jd.get<std::string>()) : DType::kInvalid;
    OAR_CHECK(dtype != DType::kInvalid, kDataLoss,
              "safetensors: {}: tensor '{}' has unsupported dtype {} (expected F32, F64, F16, BF16, I8, U8, "
              "I32, I64 or BOOL)",
              origin, name, BriefJson(jd));
    const nlohmann::json& js = entry["shape"];
    OAR_CHECK(js.is_array() && js.size() <= static_cast<size_t>(Dims::kMaxRank), kDataLoss,
              "safetensors: {}: tensor '{}' has shape {}; expected a list of at most {} extents", origin,
              name, BriefJson(js), Dims::kMaxRank);
    Dims shape;
    // Checked arithmetic, in order, as the reference implementation does: [2^32, 2^32] must not wrap to
    // 0 elements, and no partial product may leave int64 (Dims::Product computes them all).
    int64_t numel = 1;
    bool overflow = false;
    for (const nlohmann::json& e : js) {
      OAR_CHECK(e.is_number_unsigned() && e.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), kDataLoss,
                "safetensors: {}: tensor '{}' has invalid extent {} in shape {}", origin, name, BriefJson(e),
                BriefJson(js));
      shape.push_back(e.get<int64_t>());
      overflow |= __builtin_mul_overflow(numel, e.get<int64_t>(), &numel);
    }
    int64_t nbytes_signed = 0;
    overflow |= __builtin_mul_overflow(numel, static_cast<int64_t>(DTypeSize(dtype)), &nbytes_signed);
    const uint64_t nbytes = static_cast<uint64_t>(nbytes_signed);
    OAR_CHECK(!overflow, kDataLoss,
              "safetensors: {}: tensor '{}' of shape {} {} has more elements or bytes than 2^63-1", origin, name,
              BriefJson(js), DTypeName(dtype));
    const nlohmann::json& jo = entry["data_offsets"];
    OAR_CHECK(jo.is_array() && jo.size() == 2 && jo[0].is_number_unsigned() && jo[1].is_number_unsigned(),
              kDataLoss, "safetensors: {}: tensor '{}' has malformed data_offsets {}", origin, name,
              BriefJson(jo));
    const uint64_t begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    OAR_CHECK(begin <= end && end <= data_size, kDataLoss,
              "safetensors: {}: tensor '{}' spans bytes [{}, {}) but the data section has {} bytes "
              "(truncated file?)",
              origin, name, begin, end, data_size);
    OAR_CHECK(end - begin == nbytes, kDataLoss,
              "safetensors: {}: tensor '{}' ({} {}) needs {} bytes but data_offsets give {}", origin, name,
              DTypeName(dtype), shape.ToString(), nbytes, end - begin);
    file.records_.push_back({it.key(), dtype, shape, data + begin, nbytes});
  }
  // As the reference implementation: in data order, each tensor starts where the previous one ended and
  // the last ends at the end of the file. A header length a few bytes off shifts every tensor; trailing
  // bytes or a gap mean the header does not describe the file.
  std::stable_sort(file.records_.begin(), file.records_.end(),
                   [](const SafetensorsRecord& a, const SafetensorsRecord& b) {
                     return a.data < b.data || (a.data == b.data && a.nbytes < b.nbytes);
                   });
  uint64_t expected = 0;
  std::string previous;
  for (const SafetensorsRecord& r : file.records_) {
    const uint64_t begin = static_cast<uint64_t>(r.data - data);
    OAR_CHECK(begin >= expected, kDataLoss, "safetensors: {}: tensors '{}' and '{}' overlap", origin,
              BriefText(previous), BriefText(r.name));
    OAR_CHECK(begin == expected, kDataLoss,
              "safetensors: {}: tensor '{}' starts at data byte {} but {} ends at byte {}: a {}-byte gap that no "
              "tensor covers (is the header length right?)",
              origin, BriefText(r.name), begin, previous.empty() ? "the header" : "'" + BriefText(previous) + "'",
              expected, begin - expected);
    expected = begin + r.nbytes;
    previous = r.name;
  }
  OAR_CHECK(expected == data_size, kDataLoss,
            "safetensors: {}: the tensors cover {} bytes of data but the file has {} bytes after the header: {} "
            "trailing bytes (is the header length right?)",
            origin, expected, data_size, data_size - expected);
  return file;
}

const SafetensorsRecord& SafetensorsFile::Get(const std::string& name) const {
  for (const SafetensorsRecord& r : records_) {
    if (r.name == name) return r;
  }
  std::string names;
  for (const SafetensorsRecord& r : records_) {
    if (names.size() > 400) {
      names += fmt::format(", ... ({} tensors)", records_.size());
      break;
    }
    names += (names.empty() ? "" : ", ") + BriefText(r.name);
  }
  Throw(ErrorCode::kNotFound, "safetensors: {} has no tensor '{}' (it has: {})", origin_, BriefText(name), names);
}

}  // namespace oar
