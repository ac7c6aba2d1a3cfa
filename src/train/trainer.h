// train/: the training loop of `wren train`. One step (NOTES.md 4):
//   batch n = Sampler(seed).batch(n)                     (a function of (seed, n): resumable)
//   loss = mean cross-entropy of the next token; backward; clip the gradient norm
//   Muon on matrices, AdamW on the rest, lr = peak x schedule(n)
//   Exact Quantile Balancing: each MoE layer's balancing bias := the cutoffs that would have
//   given every expert exactly its share of this step's token slots (or Nenya's quantile
//   balancing, --balancing quantile)
// Data parallel over processes (train/distributed.h): rank r of W runs rows shard_of(B, r, W) of
// batch n, so the global batch is the same whatever W; the loss is the sum of every rank's
// cross-entropy over the B T targets of the global batch, its gradient summed over ranks;
// balancing takes its cutoffs over every rank's tokens; rank 0 alone prints, writes checkpoints
// and exports.
// Every `eval_every` steps the held-out split's loss in bits per byte; every
// `checkpoint_every` steps a checkpoint that resumes bit-identically; at the end the model is
// exported as an engine-ready model directory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/types.h"
#include "train/balance.h"
#include "train/distributed.h"
#include "train/optim.h"

namespace wren::train {

// How the balancing biases follow each step's routing (train/balance.h).
enum class Balancing { eqb, quantile };

struct TrainOptions {
  std::string config;                      // preset, config file or model directory
  std::vector<std::string> data;           // text files or folders
  std::vector<std::string> heldout_files;  // held out by path or file name
  int64_t heldout_every = 0;               // or every k-th document
  std::string tokenizer;                   // tokenizer.json
  std::string output;                      // the model directory to export
  std::string checkpoint;                  // checkpoint directory; resumed from when it exists
  int64_t seq_len = 256, batch = 8, steps = 1000;
  int64_t warmup = 50;
  double decay_fraction = 0.25;
  OptimSettings optim;
  double clip = 1.0;
  Balancing balancing = Balancing::eqb;
  int threads = 2;
  uint64_t seed = 0;
  int64_t eval_every = 100, eval_rows = 64, checkpoint_every = 500;
  kernels::DType export_type = kernels::DType::q8;
  bool quiet = false;
  std::string log;       // when set, rank 0 writes one JSON object per step and evaluation to it
  DistOptions dist;      // this process's rank; world 1: a single process
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0, lr_multiplier = 0, grad_norm = 0;
};

// One MoE layer's expert load in the last training step's routing.
struct LayerLoad {
  int layer = 0;
  LoadStats load;
};

struct EvalRecord {
  int64_t step = 0;
  double loss = 0, bits_per_byte = 0;
  double busiest = 0, least_used = 0;  // expert load vs fair share, mean over MoE layers
  std::vector<LayerLoad> layers;        // and per MoE layer
};

struct TrainResult {
  std::vector<StepRecord> steps;
  std::vector<EvalRecord> evals;
  double seconds = 0;                 // this invocation's steps, evaluations excluded
  double collective_seconds = 0;      // of which waiting in all-reduces (0 for one process)
  double reduced_bytes_per_step = 0;  // bytes this rank all-reduced per step
};

// Runs (or resumes) training and exports the model. `stop_after` > 0 ends the run after that
// many steps of this invocation (a checkpoint is written), as an interruption would.
TrainResult run_training(const TrainOptions& o, int64_t stop_after = 0);

}  // namespace wren::train
