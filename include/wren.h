/* wren.h: the C API of the Wren engine, for programs that embed it (an app, a desktop tool,
 * a Python module through ctypes). Plain C, no C++ types, no exceptions across it: every
 * call checks its arguments and reports a failure as a wren_status and a message
 * (wren_last_error), never by crashing. Built as libwren.so (exports only the wren_ symbols)
 * and libwren.a (the whole engine; link it with -lhwy -lstdc++ -lpthread -lm).
 *
 * Handles and their rules
 *   wren_model    one loaded model directory: weights (mapped), tokenizer. Immutable after
 *                 wren_model_load, so any number of threads may use one model at once
 *                 (tokenize, detokenize, info, perplexity, making sessions). Owned by the
 *                 caller; wren_model_free refuses (WREN_ERROR_IN_USE, the model stays valid)
 *                 while sessions over it live, so a session never outlives its model.
 *   wren_session  one sequence over a model: its caches, position, last logits and sampler.
 *                 One thread at a time (calls on one session must not overlap; the session
 *                 may move between threads); different sessions run in parallel, also on
 *                 one model. Owned by the caller, freed with wren_session_free.
 *   A handle passed after it was freed is refused with WREN_ERROR_ARGUMENT (the library
 *   keeps the set of live handles), unless its address was reused by a newer handle. A
 *   handle must not be freed while another thread is inside a call on it.
 *   Pointers returned by the library (strings, logits) are owned by it; how long each stays
 *   valid is said at its function. Buffers passed in are the caller's and are not kept.
 *
 * Sizes: a call that writes into a caller's buffer takes its capacity and reports the size
 * it needs (also when the buffer is too small: WREN_ERROR_BUFFER_TOO_SMALL), so a caller may
 * ask with capacity 0 first. */
#ifndef WREN_H
#define WREN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define WREN_API __attribute__((visibility("default")))
#else
#define WREN_API
#endif

/* The version of this header; wren_version() is the library's. A library serves headers of
 * its own major version. */
#define WREN_VERSION_MAJOR 0
#define WREN_VERSION_MINOR 1
#define WREN_VERSION_PATCH 0

typedef enum wren_status {
  WREN_OK = 0,
  WREN_ERROR_ARGUMENT = 1,          /* a null or freed handle, a null pointer, a value out of range */
  WREN_ERROR_IO = 2,                /* a file or directory that cannot be opened, read or written */
  WREN_ERROR_MODEL = 3,             /* a model directory that is invalid or needs what the engine lacks */
  WREN_ERROR_TOKEN = 4,             /* a token id outside the model's vocabulary */
  WREN_ERROR_CONTEXT_FULL = 5,      /* the session's context cannot hold the tokens asked for */
  WREN_ERROR_STATE = 6,             /* a session state of another model, context or format, or damaged */
  WREN_ERROR_BUFFER_TOO_SMALL = 7,  /* the output needs more room; the size it needs is reported */
  WREN_ERROR_IN_USE = 8,            /* a model freed while sessions over it live */
  WREN_ERROR_NO_LOGITS = 9,         /* sampling or reading logits before any token was evaluated */
  WREN_ERROR_OUT_OF_MEMORY = 10,
  WREN_ERROR_INTERNAL = 11          /* a failure inside the engine; the message says what */
} wren_status;

/* "1.2.3": the library's version. Static storage. */
WREN_API const char* wren_version(void);
/* The name of a status ("WREN_ERROR_TOKEN"); static storage. */
WREN_API const char* wren_status_name(wren_status status);
/* The message of the last call on this thread that failed, "" after a call that succeeded
 * (every call clears it on entry). Thread-local: valid until this thread's next call. */
WREN_API const char* wren_last_error(void);

/* ---- Models ------------------------------------------------------------------------------ */

typedef struct wren_model wren_model;

typedef struct wren_model_info {
  const char* name;        /* the config's name; valid while the model lives */
  int32_t vocab_size;      /* token ids are 0 .. vocab_size-1 */
  int32_t n_logits;        /* floats in a logits vector (>= vocab_size: padding rows are -inf) */
  int32_t context_length;  /* the most tokens a session over it can hold */
  int32_t n_layers;
  int32_t d_model;
  int32_t eos_token;       /* <|endoftext|>, or -1 when the tokenizer has none */
} wren_model_info;

/* Loads the model directory `dir` (config.json, *.safetensors, tokenizer.json). On success
 * *model is a new handle; on failure *model is NULL and the message names the file and what
 * is wrong (WREN_ERROR_IO: missing or unreadable; WREN_ERROR_MODEL: invalid). */
WREN_API wren_status wren_model_load(const char* dir, wren_model** model);
/* Frees a model with no live sessions (else WREN_ERROR_IN_USE and nothing happens). NULL: OK. */
WREN_API wren_status wren_model_free(wren_model* model);
WREN_API wren_status wren_model_get_info(const wren_model* model, wren_model_info* info);

/* Text to token ids. `add_special`: 1 reads special-token texts ("<|endoftext|>") as their
 * ids, 0 as plain text. Writes up to `capacity` ids and sets *n_tokens to the count the text
 * has (WREN_ERROR_BUFFER_TOO_SMALL when that is more than capacity; tokens may be NULL
 * with capacity 0). */
WREN_API wren_status wren_tokenize(const wren_model* model, const char* text, size_t text_len, int add_special,
                                   int32_t* tokens, size_t capacity, size_t* n_tokens);
/* Token ids to UTF-8 text (not NUL-terminated), the size in *text_len; as wren_tokenize for
 * capacity. A token id out of range: WREN_ERROR_TOKEN. */
WREN_API wren_status wren_detokenize(const wren_model* model, const int32_t* tokens, size_t n_tokens, char* text,
                                     size_t capacity, size_t* text_len);

typedef struct wren_perplexity_result {
  double perplexity;     /* exp(mean NLL) of the scored tokens */
  double bits_per_byte;  /* sum NLL / ln 2 / UTF-8 bytes of the scored tokens */
  int64_t windows, scored;
} wren_perplexity_result;

/* The text's perplexity as `wren perplexity` measures it: windows of `context` tokens
 * (0: min(context_length, 512)), each from a fresh sequence, second halves scored.
 * `threads` >= 1. A text shorter than one window: WREN_ERROR_ARGUMENT. */
WREN_API wren_status wren_perplexity(const wren_model* model, const char* text, size_t text_len, int64_t context,
                                     int32_t threads, wren_perplexity_result* result);

/* ---- Sessions ---------------------------------------------------------------------------- */

typedef struct wren_session wren_session;

typedef struct wren_session_params {
  int64_t context;  /* tokens the session holds, allocated up front; 0: the model's context_length */
  int32_t threads;  /* threads for one token's work, >= 1 (sessions with the same count share a pool) */
} wren_session_params;

/* context 0, threads 1. */
WREN_API wren_session_params wren_session_default_params(void);
/* A new session over `model` (params NULL: the defaults). A context larger than the model's
 * or below 1, or threads outside 1..1024: WREN_ERROR_ARGUMENT. */
WREN_API wren_status wren_session_new(wren_model* model, const wren_session_params* params, wren_session** session);
WREN_API wren_status wren_session_free(wren_session* session); /* NULL: OK */

typedef struct wren_session_info {
  int64_t position;  /* tokens evaluated so far */
  int64_t context;
  int32_t threads;
  int32_t n_logits;
} wren_session_info;
WREN_API wren_status wren_session_get_info(const wren_session* session, wren_session_info* info);

/* Evaluates a batch of prompt tokens (prefill) or one token (decode) at the session's
 * position. The logits of the last token are kept in the session (wren_session_logits) and,
 * when `logits` is not NULL, copied there (`logits_len` >= n_logits, else
 * WREN_ERROR_BUFFER_TOO_SMALL before anything runs). Every token id is checked first
 * (WREN_ERROR_TOKEN) and so is the room left (WREN_ERROR_CONTEXT_FULL): a refused call
 * changes nothing. Prefill with early_exit = 1 stops non-final prompt tokens at the model's
 * exit layer (the same logits and caches, less work; `wren generate`'s default). */
WREN_API wren_status wren_session_prefill(wren_session* session, const int32_t* tokens, size_t n_tokens,
                                          int early_exit, float* logits, size_t logits_len);
WREN_API wren_status wren_session_decode(wren_session* session, int32_t token, float* logits, size_t logits_len);
/* The last logits (*n = n_logits floats), owned by the session, valid until its next call
 * that evaluates, samples, generates or restores. Before any evaluation: WREN_ERROR_NO_LOGITS. */
WREN_API wren_status wren_session_logits(const wren_session* session, const float** logits, size_t* n);
/* The token ids evaluated so far (*n = position), owned by the session, valid as the logits. */
WREN_API wren_status wren_session_history(const wren_session* session, const int32_t** tokens, size_t* n);

/* ---- Sampling and generation ------------------------------------------------------------- */

typedef struct wren_sampler_params {
  float temperature;     /* 0: greedy (argmax; ties to the lower id) */
  int32_t top_k;         /* 0: off */
  float top_p;           /* 1: off */
  float min_p;           /* 0: off */
  float repeat_penalty;  /* 1: off */
  int32_t repeat_last_n;
  uint64_t seed;
} wren_sampler_params;

/* `wren generate`'s defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no repeat
 * penalty (1, last 64), seed 0. */
WREN_API wren_sampler_params wren_sampler_default_params(void);
/* Sets the session's sampler (and restarts its generator from params->seed). A session
 * starts with the defaults. Out-of-range settings: WREN_ERROR_ARGUMENT. */
WREN_API wren_status wren_session_set_sampler(wren_session* session, const wren_sampler_params* params);
/* Draws the next token from the last logits (the session's history feeds the repeat
 * penalty). Does not evaluate it: pass it to wren_session_decode. */
WREN_API wren_status wren_session_sample(wren_session* session, int32_t* token);

/* Called with each piece of generated text as soon as it is safe to show (UTF-8 complete,
 * not part of a stop string); `text` is valid during the call only. Return 0 to go on,
 * non-zero to stop the generation there. */
typedef int (*wren_stream_callback)(const char* text, size_t len, void* user);

typedef struct wren_generate_params {
  wren_sampler_params sampler;
  int32_t max_tokens;       /* >= 0 */
  const char* const* stops; /* n_stops NUL-terminated stop strings (may be NULL when n_stops is 0) */
  size_t n_stops;
  int ignore_eos;           /* 1: go on past <|endoftext|> */
  int early_exit;           /* 1: the prompt's prefill stops at the exit layer (as wren generate) */
} wren_generate_params;

typedef enum wren_stop_reason {
  WREN_STOP_MAX_TOKENS = 0,
  WREN_STOP_EOS = 1,
  WREN_STOP_STRING = 2,
  WREN_STOP_CALLBACK = 3
} wren_stop_reason;

typedef struct wren_generate_result {
  int32_t generated;           /* tokens sampled and emitted */
  wren_stop_reason stop_reason;
  /* As `wren generate`, the token that ended the generation (at max_tokens or a stop
   * string) was emitted but not evaluated: it is here (decode it to continue the sequence),
   * else -1. The session's history holds the prompt and every evaluated token. */
  int32_t pending_token;
} wren_generate_result;

/* max_tokens 128, no stops, eos ends, early exit on, sampler defaults. */
WREN_API wren_generate_params wren_generate_default_params(void);
/* `wren generate` on this session: tokenizes `prompt` (special texts as ids; an empty prompt
 * is <|endoftext|>, a document start), evaluates it at the session's position, then samples,
 * streams through `callback` (may be NULL) and evaluates token by token. The session must
 * hold the prompt and max_tokens more (else WREN_ERROR_CONTEXT_FULL, nothing run). At
 * temperature 0 the text equals `wren generate --temp 0`'s. `result` may be NULL. Uses its
 * own sampler from params (the session's, wren_session_set_sampler, is left as it was). */
WREN_API wren_status wren_generate(wren_session* session, const char* prompt, size_t prompt_len,
                                   const wren_generate_params* params, wren_stream_callback callback, void* user,
                                   wren_generate_result* result);

/* ---- Counters (what `wren generate --stats` prints) -------------------------------------- */

typedef struct wren_stats {
  int64_t prompt_tokens;            /* evaluated by prefill calls and generations' prompts */
  double prefill_seconds;
  int64_t decode_steps;             /* single tokens evaluated (decode calls, generated tokens run) */
  double decode_seconds;
  double decode_tokens_per_second;
  int64_t generated;                /* tokens wren_generate emitted */
  int64_t position;
  int32_t prefill_exit_layer, n_layers;
  double weight_bytes_per_token;    /* bytes one decode step reads at the current position, by kind */
  double engram_bytes_per_token;
  double lm_head_bytes_per_token;
  double cache_bytes_read_per_token;
  double state_bytes_per_token;     /* sequence state each token of context adds (f32 caches) */
  double fixed_state_bytes;         /* windows, recurrent states */
} wren_stats;
WREN_API wren_status wren_session_get_stats(const wren_session* session, wren_stats* stats);

/* ---- Session state ----------------------------------------------------------------------- */

/* The state: every cache, ring, recurrent state and the history, plus the session's last
 * logits and sampler (settings and generator), behind a header (format version, model
 * fingerprint, context, position). A restore into a session of another model or context,
 * or from a damaged state, is refused with WREN_ERROR_STATE and leaves the session as it
 * was. Same platform only (host byte order). */
WREN_API wren_status wren_session_state_size(wren_session* session, size_t* bytes);
WREN_API wren_status wren_session_save_state(wren_session* session, void* buffer, size_t capacity, size_t* written);
WREN_API wren_status wren_session_restore_state(wren_session* session, const void* buffer, size_t size);
/* To and from a file (written under a temporary name, then renamed). */
WREN_API wren_status wren_session_save_file(wren_session* session, const char* path);
WREN_API wren_status wren_session_restore_file(wren_session* session, const char* path);

#ifdef __cplusplus
}
#endif

#endif /* WREN_H */
