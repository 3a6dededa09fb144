#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/base/files.h"
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

void ExpectDataLossBytes(std::vector<std::byte> bytes, const std::string& fragment) {
  try {
    SafetensorsFile::Parse(std::move(bytes), "test.safetensors");
    FAIL() << "accepted";
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

// A well-formed header whose field nests 100,000 arrays deep: formatting the error used to recurse once
// per level (stack overflow). Now the parse refuses the depth and no message quotes unbounded input.
TEST(Safetensors, DeepNestingIsRefusedWithABoundedMessage) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string headers[] = {
      R"({"a":{"dtype":)" + deep + R"(,"shape":[1],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":)" + deep + "}}",
      R"({"__metadata__":{"k":)" + deep + "}}",
  };
  for (const std::string& header : headers) {
    try {
      SafetensorsFile::Parse(Bytes(header, 4), "deep.safetensors");
      FAIL() << "accepted 100,000-deep nesting";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
      EXPECT_NE(std::string(e.what()).find("nest deeper than"), std::string::npos) << e.what();
      EXPECT_LT(std::string(e.what()).size(), 500u);
    }
  }
  // Unclosed, as a fuzzer would write it.
  ExpectDataLoss(R"({"a":{"dtype":)" + std::string(100000, '['), 0, "not a JSON object");
}

TEST(Safetensors, MessagesQuoteHugeValuesBriefly) {
  const std::string long_text(1 << 20, 'x');
  const std::string long_list = "[" + std::string(200000, '1') + "]";
  const std::string cases[] = {
      R"({"a":{"dtype":")" + long_text + R"(","shape":[1],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"F32","shape":[)" + std::string(200000, '1') + R"(],"data_offsets":[0,4]}})",
      R"({"a":{"dtype":"F32","shape":"s)" + long_text + R"(","data_offsets":[0,4]}})",
      R"({")" + long_text + R"(":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
      R"({"__metadata__":{")" + long_text + R"(":[)" + long_text.substr(0, 1000) + "]}}",
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":")" + long_text + R"("}})",
      R"({"a":")" + long_text,
  };
  for (const std::string& header : cases) {
    try {
      SafetensorsFile::Parse(Bytes(header, 4), "long.safetensors");
      FAIL() << "accepted " << header.substr(0, 60);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
      EXPECT_LT(std::string(e.what()).size(), 600u) << std::string(e.what()).substr(0, 300);
      EXPECT_NE(std::string(e.what()).find("long.safetensors"), std::string::npos);
    }
  }
}

// As the reference implementation: the tensors, in offset order, exactly tile the data section.
TEST(Safetensors, TensorsMustExactlyFillTheDataSection) {
  const float f[4] = {1, 2, 3, 4};
  const SafetensorsRecord records[] = {
      {"a", DType::kFloat32, {2}, reinterpret_cast<const std::byte*>(f), 8},
      {"b", DType::kFloat32, {2}, reinterpret_cast<const std::byte*>(f + 2), 8},
  };
  const auto path = TempPath("fill.safetensors");
  WriteSafetensors(path, records);
  std::vector<std::byte> good = ReadFileBytes(path, "test");
  std::filesystem::remove(path);
  ASSERT_NO_THROW(SafetensorsFile::Parse(good, "good"));

  // The header length 3 bytes short: the padded JSON still parses, every weight would be read 3 bytes off.
  std::vector<std::byte> shifted = good;
  shifted[0] = static_cast<std::byte>(static_cast<uint8_t>(shifted[0]) - 3);
  try {
    SafetensorsFile::Parse(shifted, "shifted.safetensors");
    FAIL() << "accepted a header length 3 bytes short";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataLoss);
    EXPECT_NE(std::string(e.what()).find("3 trailing bytes"), std::string::npos) << e.what();
  }
  std::vector<std::byte> junk = good;
  junk.push_back(std::byte{0});
  ExpectDataLossBytes(junk, "1 trailing bytes");
  // A gap at the start, and one between two tensors.
  ExpectDataLoss(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "4-byte gap");
  ExpectDataLoss(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                 R"("b":{"dtype":"F32","shape":[1],"data_offsets":[6,10]}})",
                 10, "2-byte gap");
  // Empty tensors anywhere in the order are fine.
  EXPECT_NO_THROW(SafetensorsFile::Parse(
      Bytes(R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
            R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
            R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}})",
            4),
      "empty"));
}

TEST(Safetensors, ByteSizesThatOverflowAreRefused) {
  // 2^32 x 2^32 elements wraps to 0 in 64 bits; so does 2^62 x 4 bytes; 2^62 x 3 leaves int64 before the 0.
  ExpectDataLoss(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0, "than 2^63-1");
  ExpectDataLoss(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", 0, "than 2^63-1");
  ExpectDataLoss(R"({"a":{"dtype":"I8","shape":[65536,65536,65536,65536],"data_offsets":[0,0]}})", 0, "than 2^63-1");
  ExpectDataLoss(R"({"a":{"dtype":"I8","shape":[4611686018427387904,3,0],"data_offsets":[0,0]}})", 0, "than 2^63-1");
  ExpectDataLoss(R"({"a":{"dtype":"I8","shape":[18446744073709551615],"data_offsets":[0,0]}})", 0, "invalid extent");
  // A zero extent legitimately makes an empty tensor, whatever the others are.
  EXPECT_NO_THROW(SafetensorsFile::Parse(
      Bytes(R"({"a":{"dtype":"F32","shape":[0,4294967296],"data_offsets":[0,0]}})", 0), "zero"));
}

TEST(Safetensors, ReadNamesTheFileAndWhatIsWrongWithIt) {
  auto expect = [](const std::filesystem::path& p, ErrorCode code, const std::string& fragment) {
    try {
      SafetensorsFile::Read(p);
      FAIL() << "read " << p;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  const auto dir = TempPath("dir.safetensors");
  std::filesystem::create_directory(dir);
  expect(dir, ErrorCode::kInvalidArgument, "is a directory");
  const auto fifo = TempPath("fifo.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect(fifo, ErrorCode::kInvalidArgument, "is a FIFO");  // and does not hang
  const auto loop = TempPath("loop.safetensors");
  std::filesystem::create_symlink(loop, loop);
  expect(loop, ErrorCode::kDataLoss, "symbolic links");
  expect(TempPath("missing.safetensors"), ErrorCode::kNotFound, "does not exist");
  std::filesystem::remove(dir);
  std::filesystem::remove(fifo);
  std::filesystem::remove(loop);
}

// A write that fails (here: the file-size limit, as a full disk would) is an error and leaves no
// temporary file behind; the previous file is untouched.
TEST(Safetensors, AFailedWriteIsAnErrorAndLeavesNoTemporaryFile) {
  const float f[1] = {1};
  const SafetensorsRecord small[] = {{"a", DType::kFloat32, {1}, reinterpret_cast<const std::byte*>(f), 4}};
  const auto path = TempPath("limit.safetensors");
  WriteSafetensors(path, small);
  const std::vector<std::byte> before = ReadFileBytes(path, "test");
  std::vector<float> big(1 << 16, 2.0f);
  const SafetensorsRecord large[] = {
      {"a", DType::kFloat32, {1 << 16}, reinterpret_cast<const std::byte*>(big.data()), big.size() * 4}};
  const pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{64 << 10, 64 << 10};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      WriteSafetensors(path, large);
    } catch (const Error& e) {
      const bool ok = e.code() == ErrorCode::kResourceExhausted &&
                      std::string(e.what()).find("limit.safetensors.tmp") != std::string::npos;
      ::_exit(ok ? 0 : 2);
    }
    ::_exit(1);  // no error reported
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the failed write was not reported; 2: wrong code or message";
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  EXPECT_EQ(ReadFileBytes(path, "test"), before);
  std::filesystem::remove(path);
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
