// wren convert SRC -o DST: a Hugging Face checkpoint folder into a model directory;
// wren quantize DIR -o DIR2: a model directory re-encoded in another storage type.
// Both stream tensor by tensor (runtime/convert.h), print one progress line, and on SIGINT /
// SIGTERM stop at the next block of rows, removing the temporary output.
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>

#include "runtime/convert.h"
#include "runtime/gguf_export.h"
#include "tools/commands.h"

namespace wren::tools {

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_signal(int) { g_stop.store(true); }

struct ConvertArgs {
  std::string src, out, dtype = "q8", lm_head;
  int group = kernels::kDefaultGroup;
  bool force = false, quiet = false;
};

kernels::DType parse_storage(const std::string& flag, const std::string& s) {
  if (s == "f32") return kernels::DType::f32;
  if (s == "bf16") return kernels::DType::bf16;
  if (s == "q8") return kernels::DType::q8;
  if (s == "q4") return kernels::DType::q4;
  throw std::runtime_error(flag + ": \"" + s + "\"; expected f32, bf16, q8 or q4");
}

ConvertOptions options(const ConvertArgs& a) {
  ConvertOptions o;
  o.dtype = parse_storage("--dtype", a.dtype);
  if (!a.lm_head.empty()) o.lm_head = parse_storage("--lm-head", a.lm_head);
  o.group = a.group;
  o.overwrite = a.force;
  o.stop = &g_stop;
  if (!a.quiet) {
    auto start = std::chrono::steady_clock::now();
    auto shown = std::make_shared<double>(-1.0);
    o.progress = [start, shown](const ConvertProgress& p) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s - *shown < 0.25 && p.done != p.total) return;  // one line, redrawn at most 4 times a second
      *shown = s;
      std::fprintf(stderr, "\r%d/%d tensors, %.2f GB written, %.1f s: %-48.48s", p.done, p.total, double(p.bytes) / 1e9, s,
                   p.tensor.c_str());
      if (p.done == p.total) std::fprintf(stderr, "\n");
    };
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  return o;
}

void add_common(CLI::App* cmd, ConvertArgs& a, const char* dtype_help) {
  cmd->add_option("-o,--output", a.out, "the model directory to create")->required();
  cmd->add_option("--dtype", a.dtype, dtype_help)->capture_default_str();
  cmd->add_option("--lm-head", a.lm_head, "storage of the LM head (the embedding when tied): f32, bf16, q8, q4");
  cmd->add_option("--group", a.group, "values per scale for q8 / q4")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--force", a.force, "replace an existing model directory");
  cmd->add_flag("-q,--quiet", a.quiet, "no progress line");
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void run_convert(const ConvertArgs& a) {
  if (ends_with(a.out, ".gguf")) {
    ConvertOptions o = options(a);
    const std::string arch = export_gguf(a.src, a.out, {.overwrite = a.force, .stop = o.stop});
    std::printf("%s (GGUF, architecture %s)\n", a.out.c_str(), arch.c_str());
    return;
  }
  ConvertOptions o = options(a);
  double worst = 0;
  std::string worst_name;
  if (ends_with(a.src, ".gguf")) {
    auto progress = o.progress;
    o.progress = [&, progress](const ConvertProgress& p) {
      if (p.error > worst) worst = p.error, worst_name = p.tensor;
      if (progress) progress(p);
    };
  }
  const std::vector<std::string> unused =
      ends_with(a.src, ".gguf") ? convert_gguf_file(a.src, a.out, o) : convert_hf_checkpoint(a.src, a.out, o);
  if (!worst_name.empty())
    std::fprintf(stderr, "convert: largest storage error ||x - stored(x)|| / ||x|| = %.3g (tensor %s)\n", worst,
                 worst_name.c_str());
  if (!unused.empty()) {
    std::fprintf(stderr, "convert: %zu tensors of %s are not part of the model and were left out:", unused.size(),
                 a.src.c_str());
    for (size_t i = 0; i < unused.size() && i < 8; ++i) std::fprintf(stderr, " %s", unused[i].c_str());
    std::fprintf(stderr, "%s\n", unused.size() > 8 ? " ..." : "");
  }
  std::printf("%s\n", a.out.c_str());
}

}  // namespace

void register_convert(CLI::App& app) {
  static ConvertArgs c, q;
  auto* convert = app.add_subcommand("convert", "convert a Hugging Face folder or a GGUF file into a model directory, or a model directory into GGUF (-o X.gguf)");
  convert->add_option("source", c.src, "Hugging Face folder, GGUF file, or (for -o X.gguf) a model directory")->required();
  add_common(convert, c, "storage of matrices and tables: f32, bf16, q8, q4");
  convert->callback([] { run_convert(c); });

  auto* quantize = app.add_subcommand("quantize", "re-encode a model directory's matrices in another storage type");
  quantize->add_option("source", q.src, "model directory")->required();
  add_common(quantize, q, "storage of matrices and tables: f32, bf16, q8, q4");
  quantize->callback([] {
    quantize_model_dir(q.src, q.out, options(q));
    std::printf("%s\n", q.out.c_str());
  });
}

}  // namespace wren::tools
