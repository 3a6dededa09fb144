#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/tensor/safetensors.h"

namespace oar {
namespace {

std::filesystem::path TempPath(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("oar_st_" + std::to_string(::getpid()) + "_" + name);
}

std::vector<std::byte> Bytes(const std::string& header, size_t data_bytes) {
  std::vector<std::byte> b(8 + header.size() + data_bytes);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<std::byte>(n >> (8 * i));
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

void ExpectDataLoss(const std::string& header, size_t data_bytes, const std::string& fragment) {
  try {
    SafetensorsFile::Parse(Bytes(header, data_bytes), "test.safetensors");
    FAIL() << "accepted: " << header;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Safetensors, RoundTripsEveryDType) {
  const float f[6] = {1, 2, 3, 4, 5, 6};
  const int64_t i[2] = {-7, 1ll << 40};
  const uint8_t b[3] = {1, 0, 1};
  const SafetensorsRecord records[] = {
      {"w", DType::kFloat32, {2, 3}, reinterpret_cast<const std::byte*>(f), sizeof f},
      {"step", DType::kInt64, {2}, reinterpret_cast<const std::byte*>(i), sizeof i},
      {"mask", DType::kBool, {3}, reinterpret_cast<const std::byte*>(b), sizeof b},
      {"empty", DType::kBFloat16, {0, 4}, nullptr, 0},
  };
  const auto path = TempPath("rt.safetensors");
  WriteSafetensors(path, records, {{"format", "oar"}});
  SafetensorsFile file = SafetensorsFile::Read(path);
  ASSERT_EQ(file.records().size(), 4u);
  EXPECT_EQ(file.metadata().at("format"), "oar");
  const SafetensorsRecord& w = file.Get("w");
  EXPECT_EQ(w.dtype, DType::kFloat32);
  EXPECT_EQ(w.shape, (Dims{2, 3}));
  EXPECT_EQ(std::memcmp(w.data, f, sizeof f), 0);
  EXPECT_EQ(std::memcmp(file.Get("step").data, i, sizeof i), 0);
  EXPECT_EQ(file.Get("empty").shape, (Dims{0, 4}));
  EXPECT_THROW(file.Get("nope"), Error);
  std::filesystem::remove(path);
}

TEST(Safetensors, RejectsEveryMalformation) {
  EXPECT_THROW(SafetensorsFile::Parse(std::vector<std::byte>(5), "x"), Error);
  std::vector<std::byte> huge = Bytes("{}", 0);
  huge[3] = std::byte{1};  // header length far beyond the file
  EXPECT_THROW(SafetensorsFile::Parse(huge, "x"), Error);
  ExpectDataLoss("[1,2]", 0, "not a JSON object");
  ExpectDataLoss("{\"a\":", 0, "not a JSON object");
  ExpectDataLoss(R"({"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", 1, "unsupported dtype");
  ExpectDataLoss(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "invalid extent");
  ExpectDataLoss(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8, "needs 8 bytes");
  ExpectDataLoss(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4, "truncated");
  ExpectDataLoss(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})",
                 8, "overlap");
  ExpectDataLoss(R"({"a":{"dtype":"F32","shape":[1]}})", 4, "lacks");
  ExpectDataLoss(R"({"__metadata__":{"k":1}})", 0, "not a string");
}

TEST(Safetensors, WriterRejectsBadRecords) {
  const float f[2] = {1, 2};
  const SafetensorsRecord wrong_size[] = {{"w", DType::kFloat32, {3}, reinterpret_cast<const std::byte*>(f), 8}};
  EXPECT_THROW(WriteSafetensors(TempPath("bad.safetensors"), wrong_size), Error);
  const SafetensorsRecord dup[] = {{"w", DType::kFloat32, {2}, reinterpret_cast<const std::byte*>(f), 8},
                                   {"w", DType::kFloat32, {2}, reinterpret_cast<const std::byte*>(f), 8}};
  EXPECT_THROW(WriteSafetensors(TempPath("dup.safetensors"), dup), Error);
  EXPECT_THROW(SafetensorsFile::Read(TempPath("missing.safetensors")), Error);
}

}  // namespace
}  // namespace oar
