// wren-train (run as `wren train`): train a model from a config on text files
// (train/trainer.h) and export an engine-ready model directory. Its own binary, built only
// with libtorch (WREN_TRAIN), so that `wren` never loads torch (tools/cmd_train_launch.cpp).
//
// Data parallel (train/distributed.h): run under torchrun's variables (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), or `--nproc N` starts N ranks of this same command on this
// machine, over loopback on a free port, and waits for them; when one fails the others are
// stopped and the failure is this command's.
#include <CLI/CLI.hpp>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/cli_main.h"
#include "train/trainer.h"

namespace wren::tools {
namespace {

// A TCP port nobody listens on now (the kernel's pick for port 0).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("--nproc: cannot open a socket to find a free port");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  if (!ok) throw std::runtime_error("--nproc: cannot bind a loopback socket to find a free port");
  return ntohs(a.sin_port);
}

// Runs argv as ranks 0 .. n-1 (each with torchrun's variables) and waits for all; returns the
// first failure's status, having stopped the other ranks.
int run_local_ranks(int n, char** argv) {
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> ranks;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("--nproc: fork failed");
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::execv("/proc/self/exe", argv);
      std::perror("wren-train: exec of a rank failed");
      ::_exit(127);
    }
    ranks.push_back(pid);
  }
  int failure = 0;
  for (size_t left = ranks.size(); left > 0; --left) {
    int status = 0;
    const pid_t done = ::wait(&status);
    if (done < 0) break;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && failure == 0) {
      failure = code;
      for (const pid_t p : ranks)
        if (p != done) ::kill(p, SIGTERM);
    }
  }
  return failure;
}

void add_train_options(CLI::App* cmd) {
  static train::TrainOptions o;
  static std::string dtype = "q8";
  static double muon_lr = o.optim.muon.lr, adam_lr = o.optim.adamw_no_decay.lr;
  cmd->add_option("config", o.config, "preset name, config JSON file or model directory")->required();
  cmd->add_option("--data", o.data, "UTF-8 text files or folders")->required();
  cmd->add_option("--tokenizer", o.tokenizer, "tokenizer.json (make one with `wren tokenizer train`)")->required();
  cmd->add_option("-o,--output", o.output, "model directory to export at the end");
  cmd->add_option("--heldout", o.heldout_files, "files held out for validation (paths or names)");
  cmd->add_option("--heldout-every", o.heldout_every, "or hold out every k-th document");
  cmd->add_option("--checkpoint", o.checkpoint, "checkpoint directory (resumed from if it exists)");
  cmd->add_option("--seq-len", o.seq_len, "tokens per row")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--batch", o.batch, "rows per step")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--steps", o.steps, "optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "warmup steps")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--decay-fraction", o.decay_fraction, "share of the steps in the final 1 - sqrt(t) decay")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--muon-lr", muon_lr, "peak lr of the Muon groups")->capture_default_str();
  cmd->add_option("--adam-lr", adam_lr, "peak lr of the AdamW groups (engram tables 5x)")->capture_default_str();
  cmd->add_option("--balancing", o.balancing, "expert balancing: eqb (Exact Quantile Balancing) or quantile (Nenya's)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, train::Balancing>{
          {"eqb", train::Balancing::eqb}, {"quantile", train::Balancing::quantile}}))
      ->capture_default_str();
  cmd->add_option("--clip", o.clip, "gradient norm clip")->capture_default_str();
  cmd->add_option("-t,--threads", o.threads, "threads")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of init and data order")->capture_default_str();
  cmd->add_option("--eval-every", o.eval_every, "steps between held-out evaluations")->capture_default_str();
  cmd->add_option("--eval-rows", o.eval_rows, "held-out rows per evaluation")->capture_default_str();
  cmd->add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints")->capture_default_str();
  cmd->add_option("--dtype", dtype, "export storage of matrices: f32, bf16, q8, q4")->capture_default_str();
  cmd->add_option("--log", o.log, "append one JSON line per step and evaluation to this file");
  static int64_t stop_after = 0;
  cmd->add_option("--stop-after", stop_after, "end this run after N steps (with --checkpoint, the same command resumes it)")
      ->check(CLI::NonNegativeNumber);
  static int nproc = 1;
  static double timeout = 60;
  cmd->add_option("--nproc", nproc, "data-parallel processes started on this machine (or run under torchrun's "
                                    "RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
      ->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--dist-timeout", timeout, "seconds a rank waits for the others before failing")
      ->check(CLI::Range(1.0, 86400.0))->capture_default_str();
  cmd->callback([] {
    o.dist = train::dist_options_from_env();
    o.dist.timeout = std::chrono::milliseconds(int64_t(timeout * 1000));
    o.optim.muon.lr = o.optim.muon_batched.lr = muon_lr;
    o.optim.adamw_no_decay.lr = o.optim.adamw_decay.lr = o.optim.adamw_head.lr = adam_lr;
    o.optim.adamw_engram.lr = 5 * adam_lr;
    o.export_type = dtype == "f32" ? kernels::DType::f32 : dtype == "bf16" ? kernels::DType::bf16
                    : dtype == "q4" ? kernels::DType::q4 : kernels::DType::q8;
    if (dtype != "f32" && dtype != "bf16" && dtype != "q8" && dtype != "q4")
      throw std::runtime_error("--dtype: \"" + dtype + "\"; expected f32, bf16, q8 or q4");
    train::run_training(o, stop_after);
  });
}

// `--nproc N` (N > 1) outside a rank: this process only starts the ranks.
int local_rank_count(int argc, char** argv) {
  if (std::getenv("RANK") != nullptr) return 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::string v;
    if (a == "--nproc" && i + 1 < argc) v = argv[i + 1];
    else if (a.rfind("--nproc=", 0) == 0) v = a.substr(8);
    else continue;
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    return (*end == '\0' && n > 1 && n <= 256) ? int(n) : 1;  // other values: the parser's error
  }
  return 1;
}

}  // namespace
}  // namespace wren::tools

int main(int argc, char** argv) {
  if (const int n = wren::tools::local_rank_count(argc, argv); n > 1) {
    try {
      return wren::tools::run_local_ranks(n, argv);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "wren: error: %s\n", e.what());
      return 1;
    }
  }
  CLI::App app{"wren train: train a model on text files and export a model directory"};
  app.name("wren train");
  wren::tools::add_train_options(&app);
  return wren::tools::run_cli(app, argc, argv);
}
