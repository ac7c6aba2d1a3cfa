// train/: data-parallel training over processes, on the distributed engine libtorch ships
// (c10d: a ProcessGroupGloo whose ranks meet through a TCPStore), launched as torchrun
// launches: every process reads
//   RANK, WORLD_SIZE          its place and the number of processes
//   MASTER_ADDR, MASTER_PORT  where rank 0 listens (the TCPStore)
//   LOCAL_RANK                its place on its machine (only reported)
// so the same command runs on one machine or on several (each machine starts its own ranks
// with the same master address). `wren train --nproc N` starts N local ranks itself.
//
// Every rank holds the whole model and the whole optimizer state (replicated data
// parallelism). A step: each rank runs its shard of the global batch, the gradients are summed
// over ranks (all-reduced in buckets), and every rank takes the same optimizer step from the
// same summed gradient, so the ranks never drift apart and no weights are ever sent.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace wren::train {

struct DistOptions {
  int rank = 0, world = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // A rank that waits longer than this for the others (one died, or never came) fails.
  std::chrono::milliseconds timeout{60'000};
};

// The torchrun variables of this process; one process (world 1) when RANK and WORLD_SIZE are
// unset. Throws std::runtime_error naming the variable for a value out of range.
DistOptions dist_options_from_env();

// The process group of one rank; for world 1 every collective is the identity and nothing is
// opened. Collectives throw std::runtime_error when another rank has died or timed out.
class Dist {
 public:
  explicit Dist(const DistOptions& options = {});
  ~Dist();
  Dist(const Dist&) = delete;
  Dist& operator=(const Dist&) = delete;

  int rank() const { return options_.rank; }
  int world() const { return options_.world; }
  bool leader() const { return options_.rank == 0; }

  // In place: t := sum over ranks of t (every rank gets the sum).
  void all_reduce_sum(torch::Tensor& t);
  // In place: t := rank root's t.
  void broadcast(torch::Tensor& t, int root = 0);
  void barrier();

  // Sums the gradients of `params` over ranks, packed into buckets of about `bucket_bytes` (one
  // all-reduce per bucket rather than one per tensor). Tensors without a gradient are skipped
  // (every rank has the same ones: the same model on the same kind of batch).
  void all_reduce_gradients(const std::vector<torch::Tensor>& params, size_t bucket_bytes = size_t(16) << 20);

  // Bytes this rank has all-reduced so far, and the seconds it waited in collectives.
  double reduced_bytes() const { return reduced_bytes_; }
  double collective_seconds() const { return collective_seconds_; }

 private:
  struct Group;
  void run(const char* what, const std::function<void()>& collective);

  DistOptions options_;
  std::unique_ptr<Group> group_;
  double reduced_bytes_ = 0, collective_seconds_ = 0;
};

// Rank `rank` of `world`'s share of n items: [begin, end), as even as possible (the first
// n % world ranks take one more).
struct Shard {
  int64_t begin = 0, end = 0;
};
Shard shard_of(int64_t n, int rank, int world);

}  // namespace wren::train
