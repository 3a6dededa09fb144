// The SDK guard must turn every exception into a status with the right code, so nothing crosses the ABI.
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "oar/plugin/cpp/status.hpp"

struct oar_status_t {
  int32_t code;
  std::string message;
};

namespace {

const oar_host_api_t* TestHost() {
  static const oar_host_api_t host = [] {
    oar_host_api_t h{};
    h.struct_size = OAR_HOST_API_STRUCT_SIZE;
    h.abi_major = OAR_PLUGIN_ABI_MAJOR;
    h.abi_minor = OAR_PLUGIN_ABI_MINOR;
    h.status_create = [](int32_t code, const char* m) { return new oar_status_t{code, m}; };
    h.status_code = [](const oar_status_t* s) { return s->code; };
    h.status_message = [](const oar_status_t* s) { return s->message.c_str(); };
    h.status_destroy = [](oar_status_t* s) { delete s; };
    h.log = [](int32_t, const char*, const char*) {};
    h.log_enabled = [](int32_t) { return false; };
    return h;
  }();
  return &host;
}

struct Owned {
  explicit Owned(oar_status_t* s) : s(s) {}
  ~Owned() { delete s; }
  oar_status_t* s;
};

}  // namespace

TEST(Guard, ConvertsEachKindOfException) {
  oar::sdk::Host() = TestHost();
  EXPECT_EQ(oar::sdk::Guard([] {}), nullptr);

  Owned a(oar::sdk::Guard([] { throw oar::sdk::StatusError(OAR_STATUS_UNIMPLEMENTED, "no fp64"); }));
  ASSERT_NE(a.s, nullptr);
  EXPECT_EQ(a.s->code, OAR_STATUS_UNIMPLEMENTED);
  EXPECT_EQ(a.s->message, "no fp64");

  Owned b(oar::sdk::Guard([] { throw std::runtime_error("boom"); }));
  ASSERT_NE(b.s, nullptr);
  EXPECT_EQ(b.s->code, OAR_STATUS_INTERNAL);
  EXPECT_NE(b.s->message.find("boom"), std::string::npos);

  Owned c(oar::sdk::Guard([] { throw 42; }));
  ASSERT_NE(c.s, nullptr);
  EXPECT_EQ(c.s->code, OAR_STATUS_INTERNAL);

  Owned d(oar::sdk::Guard([]() -> oar_status_t* { return oar::sdk::MakeStatus(OAR_STATUS_UNAVAILABLE, "gone"); }));
  ASSERT_NE(d.s, nullptr);
  EXPECT_EQ(d.s->code, OAR_STATUS_UNAVAILABLE);
}
