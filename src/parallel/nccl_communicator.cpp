#include "parallel/nccl_communicator.h"

#include <dlfcn.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "core/error.h"

namespace osprey {

namespace {

// The NCCL entry points the communicator calls, looked up once.
struct Nccl {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
};

const Nccl& nccl() {
  static std::once_flag once;
  static Nccl n;
  static std::string missing;
  std::call_once(once, [] {
    void* lib = nullptr;
    for (const char* name : {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) {
      missing = std::string("NCCL (libnccl.so.2) is not installed where the loader looks: ") + dlerror();
      return;
    }
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (!p && missing.empty()) missing = std::string("NCCL lacks ") + name;
      return p;
    };
    n.get_unique_id = reinterpret_cast<decltype(n.get_unique_id)>(sym("ncclGetUniqueId"));
    n.comm_init_rank = reinterpret_cast<decltype(n.comm_init_rank)>(sym("ncclCommInitRank"));
    n.comm_destroy = reinterpret_cast<decltype(n.comm_destroy)>(sym("ncclCommDestroy"));
    n.all_reduce = reinterpret_cast<decltype(n.all_reduce)>(sym("ncclAllReduce"));
    n.all_gather = reinterpret_cast<decltype(n.all_gather)>(sym("ncclAllGather"));
    n.send = reinterpret_cast<decltype(n.send)>(sym("ncclSend"));
    n.recv = reinterpret_cast<decltype(n.recv)>(sym("ncclRecv"));
    n.group_start = reinterpret_cast<decltype(n.group_start)>(sym("ncclGroupStart"));
    n.group_end = reinterpret_cast<decltype(n.group_end)>(sym("ncclGroupEnd"));
    n.error_string = reinterpret_cast<decltype(n.error_string)>(sym("ncclGetErrorString"));
  });
  if (!missing.empty()) fail("{}", missing);
  return n;
}

void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) fail("NCCL {}: {}", what, nccl().error_string(r));
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("NCCL communicator: {}: {}", what, cudaGetErrorString(e));
}

// NVLink multicast off (the machines' rule), before NCCL reads its environment.
void keep_multicast_off() {
  const char* v = std::getenv("NCCL_NVLS_ENABLE");
  if (!v) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    return;
  }
  if (std::strcmp(v, "0") != 0) fail("NCCL_NVLS_ENABLE={}: NVLink multicast must stay off (0)", v);
}

ncclComm_t as_comm(void* c) { return static_cast<ncclComm_t>(c); }

}  // namespace

NcclId NcclCommunicator::new_id() {
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclId::bytes), "NCCL's unique id is 128 bytes");
  keep_multicast_off();
  ncclUniqueId u;
  check(nccl().get_unique_id(&u), "unique id");
  NcclId id;
  std::memcpy(id.bytes.data(), &u, sizeof(u));
  return id;
}

NcclCommunicator::NcclCommunicator(const NcclId& id, int rank, int size, int device) : rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size) fail("NCCL communicator: rank {} of {} does not exist", rank, size);
  keep_multicast_off();
  const Nccl& n = nccl();
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  ncclUniqueId u;
  std::memcpy(&u, id.bytes.data(), sizeof(u));
  ncclComm_t c = nullptr;
  check(n.comm_init_rank(&c, size, u, rank), "init");
  comm_ = c;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) nccl().comm_destroy(as_comm(comm_));
}

void NcclCommunicator::all_reduce_sum(float* data, size_t n, cudaStream_t s) {
  check(nccl().all_reduce(data, data, n, ncclFloat32, ncclSum, as_comm(comm_), s), "all-reduce");
}

void NcclCommunicator::all_gather(const float* in, size_t n, float* out, cudaStream_t s) {
  check(nccl().all_gather(in, out, n, ncclFloat32, as_comm(comm_), s), "all-gather");
}

void NcclCommunicator::send(const void* buf, size_t bytes, int peer, cudaStream_t s) {
  check(nccl().send(buf, bytes, ncclUint8, peer, as_comm(comm_), s), "send");
}

void NcclCommunicator::recv(void* buf, size_t bytes, int peer, cudaStream_t s) {
  check(nccl().recv(buf, bytes, ncclUint8, peer, as_comm(comm_), s), "recv");
}

void NcclCommunicator::send_recv(const void* send_buf, void* recv_buf, size_t bytes, int peer, cudaStream_t s) {
  const Nccl& n = nccl();
  check(n.group_start(), "group start");
  const ncclResult_t a = n.send(send_buf, bytes, ncclUint8, peer, as_comm(comm_), s);
  const ncclResult_t b = n.recv(recv_buf, bytes, ncclUint8, peer, as_comm(comm_), s);
  check(n.group_end(), "group end");
  check(a, "send");
  check(b, "recv");
}

}  // namespace osprey
