// The server's TCP connections, checked on the sockets themselves: the server runs in this
// process, so the test finds the server's side of a client connection among its own descriptors.
// Streamed tokens are small writes; without TCP_NODELAY, Nagle's algorithm holds each one until
// the client acknowledges the one before, which a kept-alive client's delayed ACK puts off by up
// to 40 ms (bench serve's TTFT median at concurrency 1 on the tiny model: 41-44 ms without the
// option, 2-3 ms with it). A TTFT bound cannot tell that from a busy machine; the option on the
// socket can. A kept-alive connection also stays open for many requests, as SDK clients and
// gateways expect of an API server. And a drain asked for before the server listens (a signal
// between bind and listen) still stops it. (The drain of requests in flight is tested end to end
// with the openai client: tests/node/test_server.mjs.)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>
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

// HTTP header names match in any case.
std::string lowercase(std::string s) {
  for (char& ch : s) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

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

// The tiny model (written once for the suite) behind a server of its own for each test, on a free
// loopback port, serving on a thread.
class ServerSocket : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    synth_checkpoint(synth_preset("tiny"), dir_->str(), {.seed = 3, .progress = false});
    weights_ = new GptOssWeights(GptOssWeights::load(dir_->str()));
    model_ = new GptOssCpuModel(*weights_);
    tok_ = new harmony::Tokenizer(harmony::Tokenizer::for_model_dir(dir_->str()));
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete model_;
    delete weights_;
    delete dir_;
  }
  void SetUp() override {
    engine_ = std::make_unique<Engine>(std::make_unique<CpuModelRunner>(*model_),
                                       EngineConfig{.max_batch = 2, .max_batched_tokens = 64, .max_queue = 2,
                                                    .max_seq_len = 64, .kv_block_size = 16, .kv_blocks = 8});
    srv_ = std::make_unique<server::OpenAiServer>(*engine_, *tok_,
                                                  server::ServerConfig{.host = "127.0.0.1", .port = 0, .model_id = "tiny"});
    ASSERT_TRUE(srv_->bind());
    serving_ = std::thread([this] { srv_->listen(); });
    port_ = srv_->bound_port();
  }
  void TearDown() override {
    if (srv_) srv_->stop();
    if (serving_.joinable()) serving_.join();
  }
  // A client socket connected to the server, or -1.
  int connect_client() const {
    const int c = ::socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0) return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(c);
      return -1;
    }
    return c;
  }
  // GET /health on c; the answer's head (status line and headers), its body read past by
  // Content-Length. Empty if the server closed the connection first.
  static std::string get_health(int c) {
    const std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    if (::send(c, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) return "";
    std::string got;
    char buf[512];
    size_t end;
    while ((end = got.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) return "";
      got.append(buf, size_t(n));
    }
    const std::string head = got.substr(0, end + 2);
    const size_t cl = lowercase(head).find("content-length:");
    const size_t body = cl == std::string::npos ? 0 : std::stoul(head.substr(cl + 15));
    while (got.size() < end + 4 + body) {
      const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) return "";
      got.append(buf, size_t(n));
    }
    return head;
  }

  static inline test::TempDir* dir_ = nullptr;
  static inline GptOssWeights* weights_ = nullptr;
  static inline GptOssCpuModel* model_ = nullptr;
  static inline harmony::Tokenizer* tok_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<server::OpenAiServer> srv_;
  std::thread serving_;
  int port_ = 0;
};

TEST_F(ServerSocket, AcceptedConnectionsSendWithoutNagle) {
  // A kept-alive request: once its answer is read, the server's side of the connection stays open.
  const int c = connect_client();
  ASSERT_GE(c, 0) << std::strerror(errno);
  const std::string head = get_health(c);
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head.substr(0, 40);

  sockaddr_in mine{};
  socklen_t len = sizeof(mine);
  ASSERT_EQ(::getsockname(c, reinterpret_cast<sockaddr*>(&mine), &len), 0);
  const int server_side = find_socket(port_, port_of(mine));
  ASSERT_GE(server_side, 0) << "no descriptor of this process holds the server's side of the connection";
  int nodelay = 0;
  len = sizeof(nodelay);
  ASSERT_EQ(::getsockopt(server_side, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len), 0);
  EXPECT_NE(nodelay, 0) << "the server's connection sends with Nagle's algorithm on (no TCP_NODELAY)";
  ::close(c);
}

// cpp-httplib closes a connection after 5 requests unless told otherwise: every sixth request of a
// client that keeps its connection (the SDKs do) would pay a new connection, and through a TLS
// gateway a new handshake. The server keeps a connection for ServerConfig::keep_alive_requests
// (1,000, nginx's default).
TEST_F(ServerSocket, KeptAliveConnectionServesManyRequests) {
  const int c = connect_client();
  ASSERT_GE(c, 0) << std::strerror(errno);
  for (int i = 0; i < 50; ++i) {
    const std::string head = get_health(c);
    ASSERT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << "request " << i << " on one connection: " << head.substr(0, 40);
    ASSERT_EQ(lowercase(head).find("connection: close"), std::string::npos) << "the server closed the connection after request " << i;
  }
  ::close(c);
}

TEST_F(ServerSocket, DrainBeforeListenStopsTheServer) {
  server::OpenAiServer other(*engine_, *tok_, server::ServerConfig{.host = "127.0.0.1", .port = 0, .model_id = "tiny"});
  ASSERT_TRUE(other.bind());
  other.drain();
  auto served = std::async(std::launch::async, [&] { return other.listen(); });
  const bool stopped = served.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  if (!stopped) other.stop();  // so that the test ends
  EXPECT_TRUE(stopped) << "a drain asked for before listen() left the server listening";
  served.wait();
}

}  // namespace
}  // namespace osprey
