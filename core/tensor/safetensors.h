// safetensors I/O (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length, a JSON
// header mapping tensor names to {dtype, shape, data_offsets} (plus an optional "__metadata__" object of
// strings), then the raw little-endian data. This layer works on host bytes; core/ops turns tensors on
// any device into these records and back.
#ifndef OAR_CORE_TENSOR_SAFETENSORS_H_
#define OAR_CORE_TENSOR_SAFETENSORS_H_

#include <cstddef>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/tensor/dims.h"
#include "core/tensor/dtype.h"

namespace oar {

/// One tensor's host bytes (row-major, dense). `data` is borrowed.
struct SafetensorsRecord {
  std::string name;
  DType dtype = DType::kInvalid;
  Dims shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
};

/// Write `records` (names must be unique and non-empty) and `metadata` to `path` atomically (a temporary
/// file renamed into place). Throws oar::Error naming the file on I/O failure.
void WriteSafetensors(const std::filesystem::path& path, std::span<const SafetensorsRecord> records,
                      const std::map<std::string, std::string>& metadata = {});

/// A parsed file held in memory. Every malformation (short file, header length beyond the file, bad JSON,
/// unknown dtype, negative extent, offsets that disagree with dtype x shape, overlap, out of bounds) is
/// reported as oar::Error(kDataLoss) naming the file and the offending entry.
class SafetensorsFile {
 public:
  // Move-only: records point into the held bytes, which a move keeps and a copy would not.
  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  static SafetensorsFile Read(const std::filesystem::path& path);
  /// Parse bytes already in memory; `origin` names them in errors.
  static SafetensorsFile Parse(std::vector<std::byte> bytes, const std::string& origin);

  /// Records in the file's data order; their `data` points into this object.
  const std::vector<SafetensorsRecord>& records() const { return records_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// The record named `name`; throws kNotFound listing the names present.
  const SafetensorsRecord& Get(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string origin_;
  std::vector<std::byte> bytes_;
  std::vector<SafetensorsRecord> records_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace oar

#endif  // OAR_CORE_TENSOR_SAFETENSORS_H_
