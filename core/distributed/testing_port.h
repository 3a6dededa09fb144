// For the store and cross-process CCL tests: a TCP port on the loopback nobody listens on now.
#ifndef OAR_CORE_DISTRIBUTED_TESTING_PORT_H_
#define OAR_CORE_DISTRIBUTED_TESTING_PORT_H_

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace oar::distributed::testing {

/// Bound to port 0 (the kernel picks one) and released.
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

}  // namespace oar::distributed::testing

#endif  // OAR_CORE_DISTRIBUTED_TESTING_PORT_H_
