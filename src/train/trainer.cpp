#include "train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/parse.h"
#include "config/read_file.h"
#include "io/safetensors.h"
#include "text/tokenizer.h"
#include "train/balance.h"
#include "train/data.h"
#include "train/export.h"
#include "train/model.h"
#include "train/schedule.h"

namespace wren::train {

namespace {

namespace fs = std::filesystem;

// ---- Checkpoints: DIR/params.safetensors (every weight-map tensor, f32, buffers included),
// DIR/muon.state, DIR/adamw.state, DIR/step. Written to DIR.tmp, then swapped in.

void save_checkpoint(const std::string& dir, const Model& model, const Optimizer& muon, const Optimizer& adamw,
                     int64_t step) {
  const std::string tmp = dir + ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  SafetensorsWriter w;
  for (const Param& p : model.params()) {
    torch::Tensor t = p.tensor.detach().to(torch::kFloat32).contiguous();
    w.add(p.info.name, Dtype::F32, p.info.shape, t.data_ptr<float>(), size_t(t.numel()) * sizeof(float));
  }
  w.write(tmp + "/params.safetensors");
  muon.save(tmp + "/muon.state");
  adamw.save(tmp + "/adamw.state");
  std::ofstream(tmp + "/step") << step << "\n";
  const std::string old = dir + ".old";
  fs::remove_all(old);
  if (fs::exists(dir)) fs::rename(dir, old);
  fs::rename(tmp, dir);
  fs::remove_all(old);
}

int64_t load_checkpoint(const std::string& dir, Model& model, Optimizer& muon, Optimizer& adamw) {
  SafetensorsFile f(dir + "/params.safetensors");
  torch::NoGradGuard no_grad;
  for (const Param& p : model.params()) {
    const TensorView& v = f.at(p.info.name);
    if (v.dtype != Dtype::F32 || v.shape != p.info.shape)
      throw std::runtime_error(dir + ": tensor " + p.info.name + " does not match the model");
    std::vector<float> values(size_t(v.numel()));
    std::memcpy(values.data(), v.data, v.nbytes);
    torch::Tensor src = torch::from_blob(values.data(), p.tensor.sizes(), torch::kFloat32);
    const_cast<torch::Tensor&>(p.tensor).copy_(src);
  }
  muon.load(dir + "/muon.state");
  adamw.load(dir + "/adamw.state");
  int64_t step = -1;
  std::ifstream(dir + "/step") >> step;
  if (step < 0) throw std::runtime_error(dir + "/step: missing or unreadable");
  return step;
}

// Every MoE layer's balancing bias from the routing of the step just taken, over every rank's
// tokens: Exact Quantile Balancing (Embla), or quantile balancing (Nenya; routes on s - beta,
// so beta = -bias).
void balance_experts(Model& model, Balancing how, const AllReduceSum& reduce) {
  torch::NoGradGuard no_grad;
  for (const Routing& r : model.routing()) {
    const FfnSpec& f = model.config().ffn(r.layer);
    if (!f.balance_bias) continue;
    const torch::Tensor& bias = model.tensor("layers." + std::to_string(r.layer) + ".ffn.balance_bias");
    torch::Tensor& b = const_cast<torch::Tensor&>(bias);
    if (how == Balancing::eqb) b.copy_(eqb_update(r.scores, bias, f.top_k, reduce));
    else b.copy_(-quantile_balance(r.scores, -bias, f.top_k, reduce));
  }
}

// The expert load of every MoE layer in the last forward, counted over every rank's tokens.
std::vector<LayerLoad> routing_load(const Model& model, Dist& dist) {
  std::vector<LayerLoad> layers;
  for (const Routing& r : model.routing()) {
    torch::Tensor counts = expert_counts(r.chosen, model.config().ffn(r.layer).n_experts).contiguous();
    dist.all_reduce_sum(counts);
    layers.push_back({r.layer, load_stats(counts)});
  }
  return layers;
}

// Mean cross-entropy (nats) of the first `rows` held-out rows, and their bits per byte; each
// rank runs its shard of the rows and the sums are reduced.
EvalRecord evaluate(Model& model, const PackedRows& heldout, const text::Tokenizer& tok, int32_t eot, int64_t rows,
                    int64_t batch, Dist& dist) {
  torch::NoGradGuard no_grad;
  EvalRecord e;
  rows = std::min(rows, heldout.rows());
  const Shard mine = shard_of(rows, dist.rank(), dist.world());
  double nll = 0, bytes = 0, count = 0;
  for (int64_t first = mine.begin; first < mine.end; first += batch) {
    const Batch b = heldout.batch(first, std::min(batch, mine.end - first));
    torch::Tensor logits = model.forward(b.inputs);
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        logits.reshape({-1, logits.size(-1)}), b.targets.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    nll += loss.item<double>();
    count += double(b.targets.numel());
    auto t = b.targets.contiguous();
    const int64_t* ids = t.data_ptr<int64_t>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (ids[i] != eot) bytes += double(tok.token_to_piece(int32_t(ids[i])).size());
  }
  torch::Tensor sums = torch::tensor({nll, count, bytes}, torch::kFloat64);
  dist.all_reduce_sum(sums);
  nll = sums[0].item<double>(), count = sums[1].item<double>(), bytes = sums[2].item<double>();
  e.loss = count > 0 ? nll / count : 0;
  e.bits_per_byte = bytes > 0 ? nll / std::log(2.0) / bytes : 0;
  return e;
}

// Debian's libtorch reaches BLAS through libblas.so.3, which is the slow reference BLAS unless
// an OpenBLAS package provides it (~10x on a 256x256 MLP step). Name the one that is mapped.
std::string live_blas() {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  while (std::getline(maps, line)) {
    const size_t at = line.find('/');
    if (at == std::string::npos) continue;
    const std::string path = line.substr(at);
    if (path.find("openblas") != std::string::npos) return "OpenBLAS (" + path + ")";
    if (path.find("libblas.so") != std::string::npos) found = path;
  }
  return found.empty() ? "unknown" : "reference BLAS (" + found + "): slow; install libopenblas0-pthread";
}

// One run of the loop: the data, the model, its optimizers and this rank's place.
struct TrainingRun {
  const TrainOptions& o;
  Dist dist;
  ModelConfig config;
  text::Tokenizer tok;
  Corpus corpus;
  Model model;
  std::vector<ParamGroup> groups;
  Muon muon;
  AdamW adamw;
  LrSchedule schedule;
  Sampler sampler;
  std::vector<torch::Tensor> trained;  // the tensors with gradients
  std::ofstream log;

  explicit TrainingRun(const TrainOptions& options);
  bool leader() const { return dist.leader(); }
  AllReduceSum reduce() {
    if (dist.world() == 1) return {};
    return [this](torch::Tensor& t) { dist.all_reduce_sum(t); };
  }
  StepRecord step(int64_t n);
  EvalRecord eval(int64_t n);
  // Every rank starts from rank 0's weights (the same seed draws them everywhere; this makes
  // it a fact, not an assumption).
  void align_weights();
};

text::Tokenizer load_tokenizer(const std::string& path, const ModelConfig& c) {
  text::Tokenizer tok = text::Tokenizer::load(path);
  if (tok.vocab_size() > c.rows())
    throw std::runtime_error(path + ": " + std::to_string(tok.vocab_size()) + " tokens do not fit the model's " +
                             std::to_string(c.rows()) + " vocabulary rows");
  return tok;
}

CorpusOptions corpus_options(const TrainOptions& o) {
  CorpusOptions co;
  co.seq_len = o.seq_len;
  co.heldout_files = o.heldout_files;
  co.heldout_every = o.heldout_every;
  return co;
}

LrSchedule lr_schedule(const TrainOptions& o) {
  LrSchedule schedule;
  schedule.total_steps = o.steps;
  schedule.warmup_steps = o.warmup;
  schedule.decay_fraction = o.decay_fraction;
  schedule.validate();
  return schedule;
}

TrainingRun::TrainingRun(const TrainOptions& options)
    : o(options),
      dist(options.dist),
      config(resolve_model_config(o.config)),
      tok(load_tokenizer(o.tokenizer, config)),
      corpus(Corpus::load(o.data, tok, corpus_options(o))),
      model(config, o.seed, corpus.eot_id()),
      groups(make_groups(model.params(), o.optim)),
      muon(groups, o.optim),
      adamw(groups, o.optim),
      schedule(lr_schedule(o)),
      sampler(corpus.train(), o.batch, o.seed) {
  if (corpus.train().rows() < 1)
    throw std::runtime_error("train: the training split holds no full row of " + std::to_string(o.seq_len) + " tokens");
  if (o.batch < dist.world())
    throw std::runtime_error("train: --batch " + std::to_string(o.batch) + " cannot be shared by " +
                             std::to_string(dist.world()) + " processes (at least one row each)");
  for (const Param& p : model.params())
    if (p.tensor.requires_grad()) trained.push_back(p.tensor);
  if (leader() && !o.log.empty()) {
    log.open(o.log, std::ios::app);
    if (!log) throw std::runtime_error(o.log + ": cannot open the training log for writing");
  }
}

void TrainingRun::align_weights() {
  if (dist.world() == 1) return;
  torch::NoGradGuard no_grad;
  for (const Param& p : model.params()) {
    torch::Tensor t = p.tensor.detach().contiguous();
    dist.broadcast(t, 0);
    const_cast<torch::Tensor&>(p.tensor).copy_(t);
  }
}

StepRecord TrainingRun::step(int64_t n) {
  // This rank's rows of the global batch n; the loss is its share of the global mean.
  const Shard mine = shard_of(o.batch, dist.rank(), dist.world());
  const Batch global = sampler.batch(n);
  const torch::Tensor inputs = global.inputs.narrow(0, mine.begin, mine.end - mine.begin);
  const torch::Tensor targets = global.targets.narrow(0, mine.begin, mine.end - mine.begin);
  torch::Tensor logits = model.forward(inputs);
  torch::Tensor loss_sum = torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  torch::Tensor loss = loss_sum / double(global.targets.numel());
  muon.zero_grad();
  adamw.zero_grad();
  loss.backward();
  dist.all_reduce_gradients(trained);
  torch::Tensor total = loss.detach().reshape({1}).to(torch::kFloat64).contiguous();
  dist.all_reduce_sum(total);
  const double norm = torch::nn::utils::clip_grad_norm_(trained, o.clip);
  const double mult = schedule.multiplier(n);
  muon.step(mult);
  adamw.step(mult);
  balance_experts(model, o.balancing, reduce());
  return {n, total.item<double>(), mult, norm};
}

EvalRecord TrainingRun::eval(int64_t n) {
  const std::vector<LayerLoad> layers = routing_load(model, dist);
  EvalRecord e = evaluate(model, corpus.heldout(), tok, corpus.eot_id(), o.eval_rows, o.batch, dist);
  e.step = n;
  e.layers = layers;
  if (!layers.empty()) {
    std::vector<LoadStats> stats;
    for (const LayerLoad& l : layers) stats.push_back(l.load);
    const LoadStats mean = mean_load_stats(stats);
    e.busiest = mean.busiest;
    e.least_used = mean.least_used;
  }
  return e;
}

void print_progress(const TrainOptions& o, const StepRecord& r, int64_t done, double secs) {
  std::fprintf(stderr, "\rstep %lld/%lld  loss %.4f  lr x%.3f  %.0f tokens/s  ETA %.0f s   ", (long long)(r.step + 1),
               (long long)o.steps, r.loss, r.lr_multiplier, double(done * o.batch * o.seq_len) / secs,
               secs / double(done) * double(o.steps - r.step - 1));
}

void print_eval(const EvalRecord& e) {
  std::fprintf(stderr, "\nstep %lld: held-out loss %.4f, %.4f bits per byte", (long long)e.step, e.loss, e.bits_per_byte);
  if (!e.layers.empty()) {
    std::fprintf(stderr, "; experts busiest %.2fx, least used %.2fx of fair share (mean); per layer:", e.busiest,
                 e.least_used);
    for (const LayerLoad& l : e.layers) std::fprintf(stderr, " %d:%.2f/%.2f", l.layer, l.load.busiest, l.load.least_used);
  }
  std::fprintf(stderr, "\n");
}

// One line of the training log; %.17g keeps every bit of the doubles.
void log_step(std::ofstream& log, const StepRecord& r) {
  if (!log.is_open()) return;
  char line[256];
  std::snprintf(line, sizeof line, "{\"step\":%lld,\"loss\":%.17g,\"lr_multiplier\":%.17g,\"grad_norm\":%.17g}\n",
                (long long)(r.step + 1), r.loss, r.lr_multiplier, r.grad_norm);
  log << line << std::flush;
}

void log_eval(std::ofstream& log, const EvalRecord& e) {
  if (!log.is_open()) return;
  char line[256];
  std::snprintf(line, sizeof line, "{\"eval_step\":%lld,\"loss\":%.17g,\"bits_per_byte\":%.17g}\n",
                (long long)e.step, e.loss, e.bits_per_byte);
  log << line << std::flush;
}

}  // namespace

TrainResult run_training(const TrainOptions& o, int64_t stop_after) {
  torch::set_num_threads(std::max(1, o.threads));
  torch::manual_seed(o.seed);
  TrainingRun run(o);
  const bool talk = !o.quiet && run.leader();
  if (talk)
    std::fprintf(stderr, "BLAS: %s; %d threads%s\n", live_blas().c_str(), o.threads,
                 run.dist.world() > 1 ? (" per process, " + std::to_string(run.dist.world()) + " processes").c_str() : "");

  int64_t start = 0;
  if (!o.checkpoint.empty() && fs::exists(o.checkpoint + "/step"))
    start = load_checkpoint(o.checkpoint, run.model, run.muon, run.adamw);
  run.align_weights();

  TrainResult result;
  double step_seconds = 0;
  int64_t done = 0;
  const double bytes0 = run.dist.reduced_bytes(), wait0 = run.dist.collective_seconds();
  for (int64_t n = start; n < o.steps; ++n) {
    const auto t0 = std::chrono::steady_clock::now();
    result.steps.push_back(run.step(n));
    step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++done;
    result.collective_seconds = run.dist.collective_seconds() - wait0;
    result.reduced_bytes_per_step = (run.dist.reduced_bytes() - bytes0) / double(done);
    log_step(run.log, result.steps.back());
    if (talk) print_progress(o, result.steps.back(), done, step_seconds);
    const bool last = n + 1 == o.steps || (stop_after > 0 && done == stop_after);
    const bool can_eval = run.corpus.heldout().rows() > 0;  // without a held-out split there is nothing to measure
    if (can_eval && ((o.eval_every > 0 && (n + 1) % o.eval_every == 0) || n + 1 == o.steps)) {
      result.evals.push_back(run.eval(n + 1));
      log_eval(run.log, result.evals.back());
      if (talk) print_eval(result.evals.back());
    }
    if (!o.checkpoint.empty() && ((o.checkpoint_every > 0 && (n + 1) % o.checkpoint_every == 0) || last)) {
      if (run.leader()) save_checkpoint(o.checkpoint, run.model, run.muon, run.adamw, n + 1);
      run.dist.barrier();  // no rank goes on (or exits) before the checkpoint is whole
    }
    if (stop_after > 0 && done == stop_after) break;
  }
  result.seconds = step_seconds;
  if (talk) {
    std::fprintf(stderr, "\n");
    if (run.dist.world() > 1 && done > 0)
      std::fprintf(stderr, "all-reduce: %.1f MB per step per rank, %.1f%% of the step time\n",
                   result.reduced_bytes_per_step / 1e6, 100 * result.collective_seconds / step_seconds);
  }
  const bool finished = result.steps.empty() || result.steps.back().step + 1 == o.steps;
  if (finished && !o.output.empty() && run.leader())
    export_model_dir(run.model, run.config, o.output, read_file(o.tokenizer), o.export_type, true);
  run.dist.barrier();
  return result;
}

}  // namespace wren::train
