// train/: the process group of a data-parallel run (equations and launch in distributed.h).
#include "train/distributed.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <csignal>
#include <cstdlib>
#include <stdexcept>

namespace wren::train {

namespace {

// An integer environment variable in [lo, hi], or `fallback` when unset.
int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi)
    throw std::runtime_error(std::string(name) + "=\"" + v + "\": expected an integer in [" + std::to_string(lo) + ", " +
                             std::to_string(hi) + "]");
  return int(x);
}

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0; }

}  // namespace

DistOptions dist_options_from_env() {
  DistOptions o;
  o.world = env_int("WORLD_SIZE", 1, 1, 1 << 16);
  o.rank = env_int("RANK", 0, 0, o.world - 1);
  o.local_rank = env_int("LOCAL_RANK", 0, 0, 1 << 16);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) o.master_addr = a;
  o.master_port = env_int("MASTER_PORT", o.master_port, 1, 65535);
  return o;
}

Shard shard_of(int64_t n, int rank, int world) {
  const int64_t base = n / world, extra = n % world;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

struct Dist::Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
};

Dist::Dist(const DistOptions& options) : options_(options) {
  if (options_.world < 1 || options_.rank < 0 || options_.rank >= options_.world)
    throw std::runtime_error("distributed: rank " + std::to_string(options_.rank) + " of world " +
                             std::to_string(options_.world) + " is out of range");
  if (options_.world == 1) return;
  // A peer that dies mid-collective must be a failed write that gloo reports (and run() turns
  // into an error naming the collective), not SIGPIPE ending this rank without a word: torch's
  // Python ignores SIGPIPE at start-up, a C++ program has to say so itself.
  std::signal(SIGPIPE, SIG_IGN);
  group_ = std::make_unique<Group>();
  c10d::TCPStoreOptions so;
  so.port = uint16_t(options_.master_port);
  so.isServer = options_.rank == 0;
  so.numWorkers = size_t(options_.world);
  so.waitWorkers = true;
  so.timeout = options_.timeout;
  const std::string where = options_.master_addr + ":" + std::to_string(options_.master_port);
  try {
    group_->store = c10::make_intrusive<c10d::TCPStore>(options_.master_addr, so);
    auto po = c10d::ProcessGroupGloo::Options::create(options_.timeout);
    // On one machine the ranks talk over loopback; across machines, over the interface that
    // GLOO_SOCKET_IFNAME names (as torch does), else the one this machine's hostname resolves to.
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    po->devices.push_back(ifname && *ifname ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                          : is_loopback(options_.master_addr) ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                                              : c10d::ProcessGroupGloo::createDefaultDevice());
    po->threads = 1;
    group_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(group_->store, options_.rank, options_.world, po);
  } catch (const std::exception& e) {
    throw std::runtime_error("distributed: rank " + std::to_string(options_.rank) + " of " +
                             std::to_string(options_.world) + " could not join the group at " + where + ": " + e.what());
  }
}

Dist::~Dist() = default;

void Dist::run(const char* what, const std::function<void()>& collective) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    collective();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("distributed: ") + what + " on rank " + std::to_string(options_.rank) + " of " +
                             std::to_string(options_.world) + " failed (another rank died or timed out after " +
                             std::to_string(options_.timeout.count() / 1000) + " s): " + e.what());
  }
  collective_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Dist::all_reduce_sum(torch::Tensor& t) {
  if (!group_) return;
  if (!t.is_contiguous()) throw std::logic_error("Dist::all_reduce_sum: the tensor must be contiguous");
  run("all-reduce", [&] {
    std::vector<torch::Tensor> ts{t};
    group_->pg->allreduce(ts)->wait();
  });
  reduced_bytes_ += double(t.numel() * t.element_size());
}

void Dist::broadcast(torch::Tensor& t, int root) {
  if (!group_) return;
  if (!t.is_contiguous()) throw std::logic_error("Dist::broadcast: the tensor must be contiguous");
  run("broadcast", [&] {
    std::vector<torch::Tensor> ts{t};
    c10d::BroadcastOptions bo;
    bo.rootRank = root;
    group_->pg->broadcast(ts, bo)->wait();
  });
}

void Dist::barrier() {
  if (!group_) return;
  run("barrier", [&] { group_->pg->barrier()->wait(); });
}

void Dist::all_reduce_gradients(const std::vector<torch::Tensor>& params, size_t bucket_bytes) {
  if (!group_) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> bucket;
  size_t bytes = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    std::vector<torch::Tensor> flat;
    for (const torch::Tensor& g : bucket) flat.push_back(g.reshape({-1}));
    torch::Tensor packed = torch::cat(flat);
    all_reduce_sum(packed);
    int64_t at = 0;
    for (torch::Tensor g : bucket) {
      g.copy_(packed.narrow(0, at, g.numel()).view(g.sizes()));
      at += g.numel();
    }
    bucket.clear();
    bytes = 0;
  };
  for (const torch::Tensor& p : params) {
    torch::Tensor g = p.grad();
    if (!g.defined()) continue;
    if (!bucket.empty() && (g.scalar_type() != bucket.front().scalar_type() || bytes >= bucket_bytes)) flush();
    bucket.push_back(g);
    bytes += size_t(g.numel() * g.element_size());
  }
  flush();
}

}  // namespace wren::train
