/* examples/stream.c: load a model directory through the C API (include/wren.h) and stream a
 * reply to a prompt as it is generated.
 *   wren_stream [MODEL_DIR [PROMPT [MAX_TOKENS [TEMPERATURE]]]]
 * defaults: models/embla-small, "It was a dark and stormy night", 60 tokens, temperature 0.8.
 * Prints the prompt, the reply, and on stderr the counters `wren generate --stats` prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wren.h"

static int print_piece(const char* text, size_t len, void* user) {
  (void)user;
  fwrite(text, 1, len, stdout);
  fflush(stdout);
  return 0; /* non-zero would stop the generation here */
}

static int fail(const char* what, wren_status status) {
  fprintf(stderr, "%s: %s: %s\n", what, wren_status_name(status), wren_last_error());
  return 1;
}

int main(int argc, char** argv) {
  const char* dir = argc > 1 ? argv[1] : "models/embla-small";
  const char* prompt = argc > 2 ? argv[2] : "It was a dark and stormy night";
  wren_generate_params params = wren_generate_default_params();
  params.max_tokens = argc > 3 ? atoi(argv[3]) : 60;
  params.sampler.temperature = argc > 4 ? (float)atof(argv[4]) : 0.8f;
  params.sampler.seed = 1;

  wren_model* model = NULL;
  wren_status st = wren_model_load(dir, &model);
  if (st != WREN_OK) return fail("load", st);

  wren_session_params sp = wren_session_default_params();
  sp.threads = 2;
  wren_session* session = NULL;
  st = wren_session_new(model, &sp, &session);
  if (st != WREN_OK) return fail("session", st);

  fputs(prompt, stdout);
  wren_generate_result result;
  st = wren_generate(session, prompt, strlen(prompt), &params, print_piece, NULL, &result);
  fputs("\n", stdout);
  if (st != WREN_OK) return fail("generate", st);

  wren_stats stats;
  wren_session_get_stats(session, &stats);
  fprintf(stderr, "wren %s: %d tokens; prompt %lld tokens in %.3f s; %lld decode steps at %.2f tokens/s\n",
          wren_version(), result.generated, (long long)stats.prompt_tokens, stats.prefill_seconds,
          (long long)stats.decode_steps, stats.decode_tokens_per_second);

  wren_session_free(session);
  return wren_model_free(model) == WREN_OK ? 0 : fail("free", WREN_ERROR_INTERNAL);
}
