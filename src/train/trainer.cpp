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

// Every MoE layer's balancing bias from the routing of the step just taken: Exact Quantile
// Balancing (Embla), or quantile balancing (Nenya; routes on s - beta, so beta = -bias).
void balance_experts(Model& model, Balancing how) {
  torch::NoGradGuard no_grad;
  for (const Routing& r : model.routing()) {
    const FfnSpec& f = model.config().ffn(r.layer);
    if (!f.balance_bias) continue;
    const torch::Tensor& bias = model.tensor("layers." + std::to_string(r.layer) + ".ffn.balance_bias");
    torch::Tensor& b = const_cast<torch::Tensor&>(bias);
    if (how == Balancing::eqb) b.copy_(eqb_update(r.scores, bias, f.top_k));
    else b.copy_(-quantile_balance(r.scores, -bias, f.top_k));
  }
}

// The expert load of every MoE layer in the last forward.
std::vector<LayerLoad> routing_load(const Model& model) {
  std::vector<LayerLoad> layers;
  for (const Routing& r : model.routing())
    layers.push_back({r.layer, load_stats(expert_counts(r.chosen, model.config().ffn(r.layer).n_experts))});
  return layers;
}

// Mean cross-entropy (nats) of the first `rows` held-out rows, and their bits per byte.
EvalRecord evaluate(Model& model, const PackedRows& heldout, const text::Tokenizer& tok, int32_t eot, int64_t rows,
                    int64_t batch) {
  torch::NoGradGuard no_grad;
  EvalRecord e;
  rows = std::min(rows, heldout.rows());
  double nll = 0, bytes = 0;
  int64_t count = 0;
  for (int64_t first = 0; first < rows; first += batch) {
    const Batch b = heldout.batch(first, std::min(batch, rows - first));
    torch::Tensor logits = model.forward(b.inputs);
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        logits.reshape({-1, logits.size(-1)}), b.targets.reshape({-1}),
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    nll += loss.item<double>();
    count += b.targets.numel();
    auto t = b.targets.contiguous();
    const int64_t* ids = t.data_ptr<int64_t>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (ids[i] != eot) bytes += double(tok.token_to_piece(int32_t(ids[i])).size());
  }
  e.loss = count ? nll / double(count) : 0;
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

}  // namespace

TrainResult run_training(const TrainOptions& o, int64_t stop_after) {
  torch::set_num_threads(std::max(1, o.threads));
  torch::manual_seed(o.seed);
  if (!o.quiet) std::fprintf(stderr, "BLAS: %s; %d threads\n", live_blas().c_str(), o.threads);
  const ModelConfig c = resolve_model_config(o.config);
  const text::Tokenizer tok = text::Tokenizer::load(o.tokenizer);
  if (tok.vocab_size() > c.rows())
    throw std::runtime_error(o.tokenizer + ": " + std::to_string(tok.vocab_size()) + " tokens do not fit the model's " +
                             std::to_string(c.rows()) + " vocabulary rows");
  CorpusOptions co;
  co.seq_len = o.seq_len;
  co.heldout_files = o.heldout_files;
  co.heldout_every = o.heldout_every;
  const Corpus corpus = Corpus::load(o.data, tok, co);
  if (corpus.train().rows() < 1) throw std::runtime_error("train: the training split holds no full row of " + std::to_string(o.seq_len) + " tokens");
  const int32_t eot = corpus.eot_id();
  Model model(c, o.seed, eot);
  const std::vector<ParamGroup> groups = make_groups(model.params(), o.optim);
  Muon muon(groups, o.optim);
  AdamW adamw(groups, o.optim);
  LrSchedule schedule;
  schedule.total_steps = o.steps;
  schedule.warmup_steps = o.warmup;
  schedule.decay_fraction = o.decay_fraction;
  schedule.validate();
  const Sampler sampler(corpus.train(), o.batch, o.seed);

  int64_t start = 0;
  if (!o.checkpoint.empty() && fs::exists(o.checkpoint + "/step")) start = load_checkpoint(o.checkpoint, model, muon, adamw);

  TrainResult result;
  auto t0 = std::chrono::steady_clock::now();
  int64_t done = 0;
  for (int64_t step = start; step < o.steps; ++step) {
    const Batch b = sampler.batch(step);
    torch::Tensor logits = model.forward(b.inputs);
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), b.targets.reshape({-1}));
    muon.zero_grad();
    adamw.zero_grad();
    loss.backward();
    std::vector<torch::Tensor> trained;
    for (const Param& p : model.params())
      if (p.tensor.requires_grad()) trained.push_back(p.tensor);
    const double norm = torch::nn::utils::clip_grad_norm_(trained, o.clip);
    const double mult = schedule.multiplier(step);
    muon.step(mult);
    adamw.step(mult);
    balance_experts(model, o.balancing);
    result.steps.push_back({step, loss.item<double>(), mult, norm});
    ++done;
    const bool last = step + 1 == o.steps || (stop_after > 0 && done == stop_after);
    if (!o.quiet) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "\rstep %lld/%lld  loss %.4f  lr x%.3f  %.0f tokens/s  ETA %.0f s   ", (long long)(step + 1),
                   (long long)o.steps, result.steps.back().loss, mult, double(done * o.batch * o.seq_len) / secs,
                   secs / double(done) * double(o.steps - step - 1));
    }
    const bool can_eval = corpus.heldout().rows() > 0;  // without a held-out split there is nothing to measure
    if (can_eval && ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || step + 1 == o.steps)) {
      const std::vector<LayerLoad> layers = routing_load(model);
      EvalRecord e = evaluate(model, corpus.heldout(), tok, eot, o.eval_rows, o.batch);
      e.step = step + 1;
      e.layers = layers;
      if (!layers.empty()) {
        std::vector<LoadStats> stats;
        for (const LayerLoad& l : layers) stats.push_back(l.load);
        const LoadStats mean = mean_load_stats(stats);
        e.busiest = mean.busiest;
        e.least_used = mean.least_used;
      }
      result.evals.push_back(e);
      if (!o.quiet) {
        std::fprintf(stderr, "\nstep %lld: held-out loss %.4f, %.4f bits per byte", (long long)e.step, e.loss, e.bits_per_byte);
        if (!layers.empty()) {
          std::fprintf(stderr, "; experts busiest %.2fx, least used %.2fx of fair share (mean); per layer:", e.busiest,
                       e.least_used);
          for (const LayerLoad& l : layers) std::fprintf(stderr, " %d:%.2f/%.2f", l.layer, l.load.busiest, l.load.least_used);
        }
        std::fprintf(stderr, "\n");
      }
    }
    if (!o.checkpoint.empty() && ((o.checkpoint_every > 0 && (step + 1) % o.checkpoint_every == 0) || last))
      save_checkpoint(o.checkpoint, model, muon, adamw, step + 1);
    if (stop_after > 0 && done == stop_after) return result;
  }
  if (!o.quiet) std::fprintf(stderr, "\n");
  if (!o.output.empty()) export_model_dir(model, c, o.output, read_file(o.tokenizer), o.export_type, true);
  return result;
}

}  // namespace wren::train
