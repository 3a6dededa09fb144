#include "core/tensor/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/base/error.h"

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

  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    OAR_CHECK(out.good(), kPermissionDenied, "safetensors: cannot open {} for writing", tmp.string());
    out.write(reinterpret_cast<const char*>(length), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const SafetensorsRecord& r : records) {
      out.write(reinterpret_cast<const char*>(r.data), static_cast<std::streamsize>(r.nbytes));
    }
    out.flush();
    OAR_CHECK(out.good(), kDataLoss, "safetensors: writing {} failed", tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  OAR_CHECK(!ec, kDataLoss, "safetensors: cannot move {} to {}: {}", tmp.string(), path.string(),
            ec.message());
}

SafetensorsFile SafetensorsFile::Read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  OAR_CHECK(in.good(), kNotFound, "safetensors: cannot open {}", path.string());
  const std::streamsize size = in.tellg();
  in.seekg(0);
  std::vector<std::byte> bytes(static_cast<size_t>(std::max<std::streamsize>(size, 0)));
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  OAR_CHECK(in.good() || size == 0, kDataLoss, "safetensors: reading {} failed", path.string());
  return Parse(std::move(bytes), path.string());
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
  nlohmann::json header = nlohmann::json::parse(header_begin, header_begin + n, nullptr, false);
  OAR_CHECK(!header.is_discarded() && header.is_object(), kDataLoss,
            "safetensors: the header of {} is not a JSON object", origin);
  const std::byte* data = file.bytes_.data() + 8 + n;
  const uint64_t data_size = size - 8 - n;

  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& entry = it.value();
    if (name == "__metadata__") {
      OAR_CHECK(entry.is_object(), kDataLoss, "safetensors: {}: __metadata__ is not an object", origin);
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        OAR_CHECK(m.value().is_string(), kDataLoss, "safetensors: {}: metadata '{}' is not a string", origin,
                  m.key());
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
              origin, name, jd.dump());
    const nlohmann::json& js = entry["shape"];
    OAR_CHECK(js.is_array() && js.size() <= static_cast<size_t>(Dims::kMaxRank), kDataLoss,
              "safetensors: {}: tensor '{}' has shape {}; expected a list of at most {} extents", origin,
              name, js.dump(), Dims::kMaxRank);
    Dims shape;
    uint64_t numel = 1;
    for (const nlohmann::json& e : js) {
      OAR_CHECK(e.is_number_unsigned() && e.get<uint64_t>() < (1ull << 48), kDataLoss,
                "safetensors: {}: tensor '{}' has invalid extent {} in shape {}", origin, name, e.dump(),
                js.dump());
      shape.push_back(e.get<int64_t>());
      numel *= e.get<uint64_t>();
      OAR_CHECK(numel < (1ull << 48), kDataLoss, "safetensors: {}: tensor '{}' is too large", origin, name);
    }
    const nlohmann::json& jo = entry["data_offsets"];
    OAR_CHECK(jo.is_array() && jo.size() == 2 && jo[0].is_number_unsigned() && jo[1].is_number_unsigned(),
              kDataLoss, "safetensors: {}: tensor '{}' has malformed data_offsets {}", origin, name,
              jo.dump());
    const uint64_t begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    const uint64_t nbytes = numel * DTypeSize(dtype);
    OAR_CHECK(begin <= end && end <= data_size, kDataLoss,
              "safetensors: {}: tensor '{}' spans bytes [{}, {}) but the data section has {} bytes "
              "(truncated file?)",
              origin, name, begin, end, data_size);
    OAR_CHECK(end - begin == nbytes, kDataLoss,
              "safetensors: {}: tensor '{}' ({} {}) needs {} bytes but data_offsets give {}", origin, name,
              DTypeName(dtype), shape.ToString(), nbytes, end - begin);
    spans.push_back({begin, end, name});
    file.records_.push_back({name, dtype, shape, data + begin, nbytes});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < spans.size(); ++i) {
    OAR_CHECK(spans[i].begin >= spans[i - 1].end, kDataLoss,
              "safetensors: {}: tensors '{}' and '{}' overlap", origin, spans[i - 1].name, spans[i].name);
  }
  std::sort(file.records_.begin(), file.records_.end(),
            [](const SafetensorsRecord& a, const SafetensorsRecord& b) { return a.data < b.data; });
  return file;
}

const SafetensorsRecord& SafetensorsFile::Get(const std::string& name) const {
  for (const SafetensorsRecord& r : records_) {
    if (r.name == name) return r;
  }
  std::string names;
  for (const SafetensorsRecord& r : records_) names += (names.empty() ? "" : ", ") + r.name;
  Throw(ErrorCode::kNotFound, "safetensors: {} has no tensor '{}' (it has: {})", origin_, name, names);
}

}  // namespace oar
