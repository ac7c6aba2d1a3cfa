"""The C API's declarations (include/wren.h) for ctypes, and the library's loading."""
import ctypes
import ctypes.util
import os
import pathlib

BUFFER_TOO_SMALL = 7


class WrenError(Exception):
    """A call the library refused: .status (the wren_status number), .name ("WREN_ERROR_TOKEN")
    and the library's message."""

    def __init__(self, status, name, message):
        super().__init__(f"{name}: {message}")
        self.status, self.name, self.message = status, name, message


class ModelInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("vocab_size", ctypes.c_int32), ("n_logits", ctypes.c_int32),
                ("context_length", ctypes.c_int32), ("n_layers", ctypes.c_int32), ("d_model", ctypes.c_int32),
                ("eos_token", ctypes.c_int32)]


class PerplexityResult(ctypes.Structure):
    _fields_ = [("perplexity", ctypes.c_double), ("bits_per_byte", ctypes.c_double), ("windows", ctypes.c_int64),
                ("scored", ctypes.c_int64)]


class SessionParams(ctypes.Structure):
    _fields_ = [("context", ctypes.c_int64), ("threads", ctypes.c_int32)]


class SessionInfo(ctypes.Structure):
    _fields_ = [("position", ctypes.c_int64), ("context", ctypes.c_int64), ("threads", ctypes.c_int32),
                ("n_logits", ctypes.c_int32)]


class SamplerParams(ctypes.Structure):
    _fields_ = [("temperature", ctypes.c_float), ("top_k", ctypes.c_int32), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("repeat_penalty", ctypes.c_float), ("repeat_last_n", ctypes.c_int32),
                ("seed", ctypes.c_uint64)]


class GenerateParams(ctypes.Structure):
    _fields_ = [("sampler", SamplerParams), ("max_tokens", ctypes.c_int32),
                ("stops", ctypes.POINTER(ctypes.c_char_p)), ("n_stops", ctypes.c_size_t),
                ("ignore_eos", ctypes.c_int), ("early_exit", ctypes.c_int)]


class GenerateResult(ctypes.Structure):
    _fields_ = [("generated", ctypes.c_int32), ("stop_reason", ctypes.c_int), ("pending_token", ctypes.c_int32)]


class Stats(ctypes.Structure):
    _fields_ = [("prompt_tokens", ctypes.c_int64), ("prefill_seconds", ctypes.c_double),
                ("decode_steps", ctypes.c_int64), ("decode_seconds", ctypes.c_double),
                ("decode_tokens_per_second", ctypes.c_double), ("generated", ctypes.c_int64),
                ("position", ctypes.c_int64), ("prefill_exit_layer", ctypes.c_int32), ("n_layers", ctypes.c_int32),
                ("weight_bytes_per_token", ctypes.c_double), ("engram_bytes_per_token", ctypes.c_double),
                ("lm_head_bytes_per_token", ctypes.c_double), ("cache_bytes_read_per_token", ctypes.c_double),
                ("state_bytes_per_token", ctypes.c_double), ("fixed_state_bytes", ctypes.c_double)]


StreamCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)

_P = ctypes.c_void_p
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_I32_P = ctypes.POINTER(ctypes.c_int32)
_PROTOTYPES = {
    "wren_version": (ctypes.c_char_p, []),
    "wren_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "wren_last_error": (ctypes.c_char_p, []),
    "wren_model_load": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(_P)]),
    "wren_model_free": (ctypes.c_int, [_P]),
    "wren_model_get_info": (ctypes.c_int, [_P, ctypes.POINTER(ModelInfo)]),
    "wren_tokenize": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, _I32_P, ctypes.c_size_t, _SIZE_P]),
    "wren_detokenize": (ctypes.c_int, [_P, _I32_P, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, _SIZE_P]),
    "wren_perplexity": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int32,
                                       ctypes.POINTER(PerplexityResult)]),
    "wren_session_default_params": (SessionParams, []),
    "wren_session_new": (ctypes.c_int, [_P, ctypes.POINTER(SessionParams), ctypes.POINTER(_P)]),
    "wren_session_free": (ctypes.c_int, [_P]),
    "wren_session_get_info": (ctypes.c_int, [_P, ctypes.POINTER(SessionInfo)]),
    "wren_session_prefill": (ctypes.c_int, [_P, _I32_P, ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(ctypes.c_float),
                                            ctypes.c_size_t]),
    "wren_session_decode": (ctypes.c_int, [_P, ctypes.c_int32, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t]),
    "wren_session_logits": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)), _SIZE_P]),
    "wren_session_history": (ctypes.c_int, [_P, ctypes.POINTER(_I32_P), _SIZE_P]),
    "wren_sampler_default_params": (SamplerParams, []),
    "wren_session_set_sampler": (ctypes.c_int, [_P, ctypes.POINTER(SamplerParams)]),
    "wren_session_sample": (ctypes.c_int, [_P, _I32_P]),
    "wren_generate_default_params": (GenerateParams, []),
    "wren_generate": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(GenerateParams),
                                     StreamCallback, _P, ctypes.POINTER(GenerateResult)]),
    "wren_session_get_stats": (ctypes.c_int, [_P, ctypes.POINTER(Stats)]),
    "wren_session_state_size": (ctypes.c_int, [_P, _SIZE_P]),
    "wren_session_save_state": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t, _SIZE_P]),
    "wren_session_restore_state": (ctypes.c_int, [_P, ctypes.c_char_p, ctypes.c_size_t]),
    "wren_session_save_file": (ctypes.c_int, [_P, ctypes.c_char_p]),
    "wren_session_restore_file": (ctypes.c_int, [_P, ctypes.c_char_p]),
}

_lib = None


def _candidates():
    if os.environ.get("WREN_LIBRARY"):
        yield os.environ["WREN_LIBRARY"]
        return
    yield str(pathlib.Path(__file__).resolve().parents[2] / "build" / "libwren.so")
    found = ctypes.util.find_library("wren")
    if found:
        yield found


def lib():
    """The loaded library, its functions declared (loaded on first use)."""
    global _lib
    if _lib is None:
        tried = []
        for path in _candidates():
            if not os.path.isabs(path) or os.path.exists(path):
                try:
                    loaded = ctypes.CDLL(path)
                    break
                except OSError as e:
                    tried.append(f"{path} ({e})")
            else:
                tried.append(f"{path} (missing)")
        else:
            raise OSError("libwren.so not found; build it (cmake --build build --target wren_shared) or set "
                          "WREN_LIBRARY. Tried: " + "; ".join(tried))
        for name, (restype, argtypes) in _PROTOTYPES.items():
            f = getattr(loaded, name)
            f.restype, f.argtypes = restype, argtypes
        _lib = loaded
    return _lib


def check(status):
    """Raises WrenError for a status other than WREN_OK, with the thread's message."""
    if status != 0:
        lib_ = lib()
        raise WrenError(status, lib_.wren_status_name(status).decode(), lib_.wren_last_error().decode())
