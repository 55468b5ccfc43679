// The server's TCP connections, checked on the sockets themselves: the server runs in this
// process, so the test finds the server's side of a client connection among its own descriptors.
// Streamed tokens are small writes; without TCP_NODELAY, Nagle's algorithm holds each one until
// the client acknowledges the one before, which a kept-alive client's delayed ACK puts off by up
// to 40 ms. tests/node/test_server.mjs measures that effect end to end (bench serve's TTFT); this
// test holds the cause, whatever the load on the machine.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <gtest/gtest.h>
#include <string>
#include <thread>

#include "engine/engine.h"
#include "harmony/tokenizer.h"
#include "model/gpt_oss_forward.h"
#include "server/openai_server.h"
#include "synth/synth.h"
#include "test_util.h"

namespace osprey {
namespace {

int port_of(const sockaddr_in& a) { return ntohs(a.sin_port); }

// The descriptor of this process whose local port is `local` and whose peer's port is `peer`
// (IPv4 TCP), or -1.
int find_socket(int local, int peer) {
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = -1;
    try {
      fd = std::stoi(e.path().filename().string());
    } catch (...) {
      continue;
    }
    sockaddr_in me{}, them{};
    socklen_t n1 = sizeof(me), n2 = sizeof(them);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &n1) != 0 || me.sin_family != AF_INET) continue;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&them), &n2) != 0) continue;
    if (port_of(me) == local && port_of(them) == peer) return fd;
  }
  return -1;
}

TEST(ServerSocket, AcceptedConnectionsSendWithoutNagle) {
  test::TempDir dir;
  synth_checkpoint(synth_preset("tiny"), dir.str(), {.seed = 3, .progress = false});
  GptOssWeights w = GptOssWeights::load(dir.str());
  GptOssCpuModel model(w);
  harmony::Tokenizer tok = harmony::Tokenizer::for_model_dir(dir.str());
  Engine engine(std::make_unique<CpuModelRunner>(model),
                EngineConfig{.max_batch = 2, .max_batched_tokens = 64, .max_queue = 2, .max_seq_len = 64, .kv_block_size = 16,
                             .kv_blocks = 8});
  server::OpenAiServer srv(engine, tok, {.host = "127.0.0.1", .port = 0, .model_id = "tiny"});
  ASSERT_TRUE(srv.bind());
  std::thread serving([&] { srv.listen(); });
  const int port = srv.bound_port();

  // A kept-alive request: once its answer is read, the server's side of the connection stays open.
  const int c = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(c, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  const std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ASSERT_EQ(::send(c, req.data(), req.size(), 0), ssize_t(req.size()));
  std::string answer;
  char buf[512];
  while (answer.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
    ASSERT_GT(n, 0) << "the server closed the connection before answering";
    answer.append(buf, size_t(n));
  }
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer.substr(0, 40);

  sockaddr_in mine{};
  socklen_t len = sizeof(mine);
  ASSERT_EQ(::getsockname(c, reinterpret_cast<sockaddr*>(&mine), &len), 0);
  const int server_side = find_socket(port, port_of(mine));
  ASSERT_GE(server_side, 0) << "no descriptor of this process holds the server's side of the connection";
  int nodelay = 0;
  len = sizeof(nodelay);
  ASSERT_EQ(::getsockopt(server_side, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len), 0);
  EXPECT_NE(nodelay, 0) << "the server's connection sends with Nagle's algorithm on (no TCP_NODELAY)";

  ::close(c);
  srv.stop();
  serving.join();
}

}  // namespace
}  // namespace osprey
