// libFuzzer target: a GGUF file taken as a model (runtime/gguf_import, runtime/convert): its
// metadata read as a config (llama.cpp's architecture keys, Llama 3's rope_freqs.weight
// divisors), tokenizer.ggml.* written as tokenizer.json and tokenizer_config.json, every
// weight's element runs checked to lie inside their tensor, then the file converted to a
// model directory at f32 that must open and decode 3 tokens. Any input does all of that or
// stops with an error; an unbounded allocation (std::bad_alloc, or ASan's allocation-size
// report) is a failure. The seeds (tests/fuzz/corpus/gguf_model/) are a 2-layer Llama-3-scaled
// model (d_model 64) as `wren convert` exports it at q8 (Q8_0) and as llama.cpp's
// llama-quantize writes it at Q4_K_M (Q5_0 and Q8_0 rows: 64 columns are not a K block).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "runtime/convert.h"
#include "runtime/gguf_import.h"
#include "runtime/model_files.h"
#include "runtime/session.h"

namespace fs = std::filesystem;

namespace {

fs::path work_dir;

// Every run of `t`'s weight lies inside the GGUF tensor it reads.
void check_runs(const wren::GgufModel& g, const wren::TensorInfo& t) {
  for (const wren::ElementRun& r : g.runs(t)) {
    if (!r.gguf) std::abort();
    const uint64_t numel = uint64_t(r.gguf->numel());
    if (r.count == 0) continue;
    if (r.stride == 0 || r.first >= numel || (r.count - 1) > (numel - 1 - r.first) / r.stride) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  work_dir = fs::temp_directory_path() / ("wren-fuzz-gguf-model-" + std::to_string(getpid()));
  fs::create_directories(work_dir);
  std::atexit([] {
    std::error_code ec;
    fs::remove_all(work_dir, ec);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path file = work_dir / "m.gguf", out = work_dir / "m";
  {
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  std::error_code ec;
  fs::remove_all(out, ec);
  try {
    const wren::GgufModel g(file.string());
    (void)g.tokenizer_json();
    (void)g.tokenizer_config_json();
    for (const wren::TensorInfo& t : wren::build_weight_map(g.config()).tensors) check_runs(g, t);
    wren::ConvertOptions o;
    o.dtype = wren::kernels::DType::f32;
    wren::convert_gguf_file(file.string(), out.string(), o);
    wren::Session s(wren::open_model(out.string()), {.context = 8});
    std::vector<float> logits(size_t(s.vocab_rows()));
    for (int step = 0; step < 3; ++step) s.decode(int32_t(step), logits.data());
  } catch (const std::bad_alloc&) {
    std::abort();  // an allocation nobody bounded
  } catch (const std::exception&) {
  }
  return 0;
}
