// runtime/: one sequence being generated. A Session holds everything that changes per token
// (K/V caches, the full layers' scores for their sparse layers, the residual sources, the
// token history) over an immutable, shared Model; all of it is allocated when the session is
// made, none per token. Several sessions over one Model serve several users.
//
// The forward pass walks the config's layer schedule: the schedule is data, so Embla,
// Nenya and ordinary models are different lists, not different code paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "config/layer_plan.h"
#include "kernels/threads.h"
#include "model/attention.h"
#include "model/attn_residuals.h"
#include "model/engram_gate.h"
#include "model/ffn.h"
#include "model/kv_cache.h"
#include "model/mhc.h"
#include "model/mla.h"
#include "model/model.h"
#include "model/sparsity_probe.h"

namespace wren {

class Session;

// The residual state of one token on its way through the layers: its position, the stream
// (or mHC's n streams, or the attention-residual sources e, g, the finished blocks and the
// partial sum) and the current sublayer's mHC boundary. A Session keeps one per row of the
// largest batch it runs (prefill's chunk).
struct TokenState {
  int64_t pos = 0;
  int slot = 0;  // which of the session's states: its row of per-row buffers (kept scores)
  std::vector<float> e, g, partial, x;
  std::vector<std::vector<float>> blocks;
  int finished_blocks = 0;
  bool partial_empty = true;
  MhcBoundary boundary;
};

// One row of a batched forward: a token of some session. Rows of one session come in the
// order of their positions; every session of a batch runs over the same Model.
// What a batch ran for one of its rows ahead of the row's own steps at a layer (a single row
// runs them itself): the gated engram's projections (engram.v set), and a place for the
// bridged layers' normed K/V inputs ([bridges][d_model]), which the batch then projects as
// one GEMM per matrix (bridge_x set) instead of each row filling those caches alone.
struct BatchedRow {
  EngramGateRow engram;
  float* bridge_x = nullptr;
};

struct BatchRow {
  Session* session = nullptr;
  int32_t token = 0;
  float* logits = nullptr;  // null: none wanted (a prompt token before the last)
  bool all_layers = true;   // false: stop after filling the exit layer's cache (early exit)
};

// Working memory of a batched forward, grown once to the largest batch.
struct BatchScratch {
  std::vector<float> x, y;               // [rows][d]: the batched FFN's inputs and outputs
  std::vector<int32_t> active, state_of;  // rows still running; each row's TokenState slot
  std::vector<int32_t> experts;           // [rows][top_k]
  FfnBatchScratch ffn;
  std::vector<float> xn, xq;               // [rows][d]: an attention layer's normed inputs, of the rows that attend
  std::vector<char> attends;               // per active row: runs the layer's attention (else stops there)
  AttentionBatch attention;
  MlaBatch mla;
  EngramGateBatch engram;                  // the gated engram's projections of the active rows
  std::vector<float> bridge_x, bridge_k, bridge_v;  // [rows][bridges][d]; a bridged layer's K, V of every row
  void reserve(int64_t rows, const ModelConfig& c);
};

// Runs the rows through the model layer by layer: per layer, each row's sequence mixer in
// row order (so a row attends to the rows before it, which are already in the caches),
// then the FFN of all rows still running as one batched product (the weights read once for
// all rows). Rows with logits get them. Every row's session must hold TokenStates for its
// rows (prefill's chunk; one for decode).
void forward_batch(std::span<const BatchRow> rows, BatchScratch& scratch);

struct SessionOptions {
  int64_t context = 0;  // tokens the caches hold; 0: the config's context_length
  int threads = 1;
  // When not null, the layers count their sparsity into it (wren sparsity); it must be made
  // for this model's config and outlive the session. Null: the layers only test the pointer.
  SparsityProbe* probe = nullptr;
  LmHeadMode lm_head = {};  // the exact head unless told (model/lm_head.h)
  // The savings, each switchable off to measure it (wren bench / generate --no-vskip,
  // --no-neuron-skip): ReLU^2 attention skips value rows of weight 0, ReLU^2 FFNs read only
  // the down rows of neurons that fired. Off gives the same outputs.
  bool v_skip = true, neuron_skip = true;
  // A prompt's chunk attends as one block of queries (model/attention.h QueryBlock), its K/V
  // tiles decoded once for all rows. false: row by row, decode's own steps and bits (tests
  // comparing two sessions bit for bit, or measuring the block's gain).
  bool block_attention = true;
  // Storage of the K/V and MLA caches (model/kv_cache.h). Unset: f16 when the caches at f16
  // for the whole context fit in kv_budget_bytes, q8 otherwise (default_kv_type).
  std::optional<KvType> kv = std::nullopt;
  double kv_budget_bytes = 0;  // 0: a quarter of the machine's physical memory
  // Tokens per prefill chunk (the rows of one batched forward); 0: the tuned default. The
  // kept scores of sparse layers may cut it further (Session::chunk()).
  int64_t prefill_chunk = 0;
};

// One named piece of a session's mutable state, as bytes (runtime/session_state.h).
struct StateBuffer {
  std::string name;
  std::span<std::byte> bytes;
};

class Session {
 public:
  Session(std::shared_ptr<const Model> model, const SessionOptions& options = {});

  const Model& model() const { return *model_; }
  int64_t position() const { return int64_t(history_.size()); }
  int64_t context() const { return context_; }
  int vocab_rows() const { return model_->config.rows(); }
  const std::vector<int32_t>& history() const { return history_; }

  // Runs a prompt. With early_exit, tokens before the last stop after the model's exit layer
  // (every cache is already filled by then); the last runs every layer. Writes the last
  // token's logits ([vocab_rows()]; padding rows -inf).
  void prefill(std::span<const int32_t> tokens, float* logits, bool early_exit = true);
  // One more token; writes its logits.
  void decode(int32_t token, float* logits);
  // Prefix reuse: `prompt` is the whole history so far plus new tokens (a chat's next turn).
  // When the session's history is a proper prefix of it, only the new tokens run (as
  // prefill); returns how many tokens were reused. Throws std::invalid_argument when the
  // history is not a proper prefix (a new Session must start over).
  int64_t extend(std::span<const int32_t> prompt, float* logits, bool early_exit = true);
  // Tokens per prefill chunk: the rows a batched forward runs at once.
  int64_t chunk() const { return chunk_; }

  // Memory of the sequence-mixer state as allocated: bytes each further token of context adds
  // (full K/V and MLA caches), and bytes that do not grow (window rings, recurrent states).
  double cache_bytes_per_token() const;
  double fixed_state_bytes() const;
  // The same growth for a config and cache type without a session: caches of the layers
  // that grow at the config's context_length, allocated for one token and measured.
  static double cache_bytes_per_token(const ModelConfig& c, KvType type);
  // The rule for an unset SessionOptions::kv: f16 when cache_bytes_per_token(c, f16) x
  // context fits in budget_bytes (0: a quarter of physical memory), else q8. f16 as llama.cpp's
  // default: half of f32's bytes, which at depth are a token's largest part after the weights,
  // read in place by the attention kernels (kernels/f16_hwy-inl.h).
  static KvType default_kv_type(const ModelConfig& c, int64_t context, double budget_bytes = 0);
  KvType kv_type() const { return kv_type_; }
  // Bytes of engram rows requested ahead of their reads so far (request_engram_rows).
  double engram_bytes_requested() const { return engram_requested_; }
  // V rows of the ReLU^2 layers read and skipped so far (V-skip per KV group).
  const VReads& v_reads() const { return attn_.v_reads; }

  // The experts each MoE layer chose for the last token run through it ([layer][top_k]).
  const std::vector<std::vector<int32_t>>& last_experts() const { return last_experts_; }
  // What the LM head read for the last logits written.
  const LmHeadRead& last_lm_head() const { return last_lm_head_; }

  // Every buffer that carries from one token to the next, by name, in a fixed order: what
  // runtime/session_state.h saves and restores (defined there; a new buffer is added there).
  // The history is first sized to `position` tokens (<= context()), so a restore gets the
  // spans it fills; a save passes position().
  std::vector<StateBuffer> state(int64_t position);
  // Why a step of this session failed (an exception left its caches part-written: some layers
  // hold the token, later ones not), or empty. A failed session refuses further steps until a
  // restore (runtime/session_state.h) rewrites every buffer and calls restored().
  const std::string& failure() const { return failure_; }
  void restored() { failure_.clear(); }

 private:
  friend void forward_batch(std::span<const BatchRow> rows, BatchScratch& scratch);
  // The constructor's steps after the shapes: each layer's recurrent state or cache and the
  // scratch its kind needs (with the engram's n-gram history), then the rows of a prompt's
  // chunk and the per-token buffers.
  void init_layer_states();
  void reserve_rows();
  // forward_batch's work once its sessions are known to be whole.
  static void forward_rows(std::span<const BatchRow> rows, BatchScratch& scratch);
  // The steps forward_batch runs for one row, on the state `use` selected.
  void use(TokenState& state) { r_ = &state; }
  // Layer i up to the FFN's normed input, written to `ffn_x`; false when the row stops here
  // (early exit: only the layer's own cache entry was filled).
  // `batched`: what the batch ran for this row (BatchedRow; empty: the row runs it all).
  bool mixer_step(int layer, bool all_layers, float* ffn_x, const BatchedRow& batched = {});
  // mixer_step's two ends: up to the mixer's normed input `xn` (false: the row stops here,
  // having filled its cache entry when `fill_exit`), and from the mixer's output on.
  bool mixer_input(int layer, bool all_layers, float* xn, bool fill_exit, const BatchedRow& batched = {});
  void mixer_output(int layer, const float* out, float* ffn_x);
  // Layer `layer` (an attention kind) for every active row of a batch, its projections as
  // GEMMs: the rows' inputs, then each row's cache entry and attention in row order, then
  // the output GEMM and each row's FFN input (written to scratch.x; rows that stop leave).
  static void attention_batch(int layer, std::span<const BatchRow> rows, BatchScratch& scratch);
  // The same for an MLA layer: W_kva, W_q (or W_qa, W_qb) and W_g as GEMMs, each row's cache
  // entry and absorbed attention in row order, then W_o as one GEMM.
  static void mla_batch(int layer, std::span<const BatchRow> rows, BatchScratch& scratch);
  // attention_batch's rows as one block of queries (model/attention.h QueryBlock): possible
  // for softmax and ReLU^2 layers when every row is this session's (a prompt's chunk), no
  // probe counts per token, and the chunk's cache entries overwrite no key a row reads.
  static bool block_attends(int layer, std::span<const BatchRow> rows, const BatchScratch& scratch);
  // The nq attending rows' queries finished, the keys cached before the chunk attended, the
  // chunk's own entries appended (own cache), then those attended; the heads' outputs to
  // scratch.attention.o.
  static void attention_block(int layer, std::span<const BatchRow> rows, BatchScratch& scratch, int64_t nq);
  // The batched mixers' two ends. batch_inputs: every active row's normed input to
  // scratch.xn, the rows that attend (not stopped by early exit) also to scratch.xq and marked
  // in scratch.attends; returns their count. batch_outputs: from each attending row's mixer
  // output (scratch.y, in their order) its residual write and FFN input (scratch.x); the
  // other rows leave the batch.
  // The gated engram before layer `layer` for every active row (scratch.engram): the rows'
  // lookups, then W_value and W_key as one GEMM each; each row applies its own in mixer_input.
  static void engram_batch(int layer, std::span<const BatchRow> rows, BatchScratch& scratch);
  // Active row a's BatchedRow at layer `layer`: the engram's projections when engram_batch ran,
  // and its place in scratch.bridge_x when the layer has bridges and the batch has rows to share.
  static BatchedRow batched_row(int layer, std::span<const BatchRow> rows, BatchScratch& scratch, int64_t a);
  // The bridged layers' cache entries of every active row from scratch.bridge_x: K and V (or
  // MLA's W_kva) as one GEMM per matrix, then each row's entry appended in row order.
  static void fill_bridges(int layer, std::span<const BatchRow> rows, BatchScratch& scratch);
  // The session of batch row j, switched to that row's residual state (use()).
  static Session& enter_row(std::span<const BatchRow> rows, const BatchScratch& scratch, int32_t j);
  static int64_t batch_inputs(int layer, std::span<const BatchRow> rows, BatchScratch& scratch);
  static void batch_outputs(int layer, std::span<const BatchRow> rows, BatchScratch& scratch);
  // A Gated DeltaNet layer for a prompt's rows (one session, in order) through the chunked
  // form (gdn_prefill), which leaves the state where token-by-token decode would.
  static void recurrent_batch(int layer, std::span<const BatchRow> rows, BatchScratch& scratch);
  void ffn_step(int layer, const float* ffn_out);
  void embed(int32_t token);
  // Requests every engram row this token's step will read (model/engram.h), Embla's and each
  // Nenya layer's, before the step runs.
  void request_engram_rows_ahead();
  std::span<const int32_t> ngram_context(int order);
  const float* sublayer_input(int layer, bool ffn, const MixWeights& mix, const MhcWeights& mhc, MhcBoundary& boundary);
  void gather_residual_sources(const ResidualSourceSet& set);
  // The bridged layers' K/V inputs at `layer`: each filled now (bridge_x null) or written to
  // bridge_x ([bridges][d]) for the batch's fill_bridges.
  void bridge_kv(int layer, float* bridge_x = nullptr);
  // A layer's own cache entry for this token (its K/V products from `projected` when set).
  void fill_cache(int layer, const float* x, const Projected* projected = nullptr);
  void run_mixer(int layer, const float* x, float* out, const Projected* projected = nullptr);
  void run_ffn(int layer, const float* x, float* out);
  void add_output(const float* out, const Vec& post_norm, const MhcBoundary& boundary);
  void finish(float* logits);

  std::shared_ptr<const Model> model_;
  int64_t context_ = 0;
  KvType kv_type_ = KvType::f32;
  kernels::ThreadPool* pool_;  // the process's pool of options.threads threads
  std::vector<int32_t> history_;
  std::string failure_;  // failure() above
  std::vector<KvCache> kv_;                 // per layer; empty without a cache of its own
  std::vector<MlaCache> mla_;               // per MLA layer
  std::vector<GdnState> gdn_;               // per Gated DeltaNet layer
  std::vector<ShortConvState> short_conv_;  // per short-conv layer
  std::vector<Mamba2State> mamba2_;         // per Mamba-2 layer
  std::vector<EngramGateState> engram_gate_;  // per layer Nenya's engram is added before
  std::vector<std::vector<float>> scores_;  // per full layer with sparse dependents: [chunk][kv_heads][context]
  std::vector<std::vector<int32_t>> last_experts_;
  SparsityProbe* probe_ = nullptr;
  bool block_attention_ = true;
  LmHeadMode lm_head_;
  LmHeadScratch lm_scratch_;
  LmHeadBackoff lm_backoff_;
  LmHeadRead last_lm_head_;

  // Residual state: one per row of a chunk; r_ the row being run.
  int d_ = 0;
  int streams_ = 1;
  int64_t chunk_ = 1;
  std::vector<TokenState> rows_;
  TokenState* r_ = nullptr;
  int64_t scores_stride_ = 0;               // floats of one row's kept scores in scores_[layer]
  MhcBoundary bridge_boundary_;             // a bridge's mHC read (its write is never used)
  ResidualSources sources_;
  BatchScratch batch_;                      // this session's own batches (prefill, decode)

  // Scratch.
  std::vector<float> h_, xn_, out_, tmp_, mix_weights_;
  std::vector<int64_t> engram_rows_;
  std::vector<int64_t> engram_ahead_;  // one engram's rows, as requested ahead
  double engram_requested_ = 0;        // bytes of engram rows requested ahead, this session
  std::vector<int32_t> ngram_;  // the last max-order token ids, kPad before the start
  AttentionScratch attn_;
  MlaScratch mla_scratch_;
  GdnScratch gdn_scratch_;
  ShortConvScratch short_conv_scratch_;
  Mamba2Scratch mamba2_scratch_;
  MhcScratch mhc_scratch_;
  EngramGateScratch engram_scratch_;
  FfnScratch ffn_;
};

}  // namespace wren
