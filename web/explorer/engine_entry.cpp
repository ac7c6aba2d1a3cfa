// The WebAssembly entry point of the explorer page: one function, JSON in and JSON out, over
// explore/page_request.h. scripts/build-explorer-page compiles it with config/ and explore/.
#include <emscripten/emscripten.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "explore/page_request.h"

namespace wren {
// The page carries its presets (wren explore --html writes them in); the engine never loads one
// by name, so the preset table parse.cpp links against is empty here.
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_presets() {
  static const std::vector<std::pair<std::string_view, std::string_view>> none;
  return none;
}
}  // namespace wren

// The one function that catches: scripts/build-explorer-page allows exception catching here
// only (EXCEPTION_CATCHING_ALLOWED), since emscripten's JS exception handling would otherwise
// route every call of the cost model through JavaScript, 100 times slower. An error unwinds
// the frames below without their destructors; the few bytes that leaks per invalid setting
// are the price of a fast engine.
extern "C" EMSCRIPTEN_KEEPALIVE const char* wren_answer(const char* request) {
  static std::string answer;
  try {
    answer = wren::explore::answer_page_request(wren::Json::parse(request)).dump();
  } catch (const std::exception& e) {
    answer = wren::Json({{"ok", false}, {"error", e.what()}}).dump();
  }
  return answer.c_str();
}
