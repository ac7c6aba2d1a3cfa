// libFuzzer target: opening a model directory (io/model_dir, runtime/model_files) and running
// a few decode steps. The target writes a tiny valid model once (two layers: softmax attention
// with RoPE + a dense FFN, ReLU^2 attention + a routed MoE); each input replaces one of its
// files: the first byte picks which (config.json, tokenizer.json, model.safetensors), the rest
// is the file. Whatever opens must run a prompt and 3 decode steps or stop with an error; an
// unbounded allocation (std::bad_alloc, or ASan's allocation-size report) is a failure. The
// seeds (tests/fuzz/corpus/model_dir/) are the three files as `wren init` writes this config
// with --dtype q8 --group 32 --seed 1, each behind its selector byte.
// wren_tests links it too and replays its seeds and 300 mutations of them
// (FuzzModelDir.SeedsAndMutations), so the GCC builds (plain and ASan + UBSan) run it as well.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>

#include "config/parse.h"
#include "runtime/model_files.h"
#include "runtime/session.h"
#include "text/bpe_train.h"

namespace fs = std::filesystem;

namespace {

const char* kConfig = R"({
  "name": "fuzz", "d_model": 16, "vocab_size": 257, "vocab_pad": 7, "context_length": 16,
  "mixers": {"a": {"kind": "attention", "n_heads": 2, "n_kv_heads": 1, "head_dim": 8, "rope": {"theta": 10000}},
             "r": {"kind": "relu2_attention", "n_heads": 2, "n_kv_heads": 2, "head_dim": 8}},
  "ffns": {"d": {"kind": "dense", "activation": "swiglu", "hidden": 24},
           "m": {"kind": "moe", "activation": "swiglu", "n_experts": 4, "top_k": 2, "expert_hidden": 8}},
  "layers": [{"mixer": "a", "ffn": "d"}, {"mixer": "r", "ffn": "m"}]
})";

const char* const kFiles[] = {"config.json", "tokenizer.json", "model.safetensors"};

std::string seed_dir, work_dir;

void spill(const fs::path& p, const void* data, size_t n) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(n));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const fs::path root = fs::temp_directory_path() / ("wren-fuzz-model-" + std::to_string(getpid()));
  seed_dir = (root / "seed").string();
  work_dir = (root / "work").string();
  fs::create_directories(work_dir);
  const wren::ModelConfig c = wren::parse_model_config(wren::parse_json(kConfig, "fuzz config"), "fuzz config");
  wren::write_random_model(seed_dir, c, 1, wren::kernels::DType::q8, 32, wren::text::train_bpe({}, {.vocab_size = 257}).dump(),
                           true, 1);
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(fs::path(seed_dir).parent_path(), ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int replaced = data[0] % 3;
  for (int i = 0; i < 3; ++i) {
    const fs::path to = fs::path(work_dir) / kFiles[i];
    if (i == replaced) spill(to, data + 1, size - 1);
    else fs::copy_file(fs::path(seed_dir) / kFiles[i], to, fs::copy_options::overwrite_existing);
  }
  try {
    wren::OpenedModel m = wren::open_model_and_tokenizer(work_dir);
    wren::Session s(m.model, {.context = 8});
    std::vector<float> logits(size_t(m.model->config.rows()));
    std::vector<int32_t> prompt = m.tokenizer.encode("Hello, world");
    prompt.resize(std::min<size_t>(prompt.size(), 4));
    if (prompt.empty()) prompt.push_back(0);
    s.prefill(prompt, logits.data(), false);
    for (int step = 0; step < 3; ++step) s.decode(int32_t(step % m.model->config.vocab_size), logits.data());
  } catch (const std::bad_alloc&) {
    std::abort();  // an allocation nobody bounded
  } catch (const std::exception&) {
  }
  return 0;
}
