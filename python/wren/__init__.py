"""Wren from Python: the C API (include/wren.h) through ctypes, no compiled extension.

    import wren
    model = wren.Model("models/embla-small")
    print(model.generate("It was a dark and stormy night", max_tokens=60, temperature=0.8))

The library is libwren.so of a build of this repository: $WREN_LIBRARY when set, else
build/libwren.so beside this python/ folder, else one the dynamic loader finds. Logits are
numpy arrays when numpy can be imported (lists of floats otherwise).
"""
import ctypes
import os
import queue
import threading

try:
    import numpy as _np
except ImportError:  # numpy is optional
    _np = None

from . import _capi
from ._capi import WrenError

__all__ = ["Model", "Session", "WrenError", "version"]


def version():
    """The library's version, "major.minor.patch"."""
    return _capi.lib().wren_version().decode()


def _sampler(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed):
    p = _capi.lib().wren_sampler_default_params()
    p.temperature, p.top_k, p.top_p, p.min_p = temperature, top_k, top_p, min_p
    p.repeat_penalty, p.repeat_last_n, p.seed = repeat_penalty, repeat_last_n, seed
    return p


def _floats(pointer, n):
    if _np is not None:
        return _np.ctypeslib.as_array(pointer, shape=(n,)).copy()
    return list(pointer[:n])


class _Handle:
    """A library handle freed by close() (or a with block, or garbage collection)."""

    _free = None  # the name of the library function that frees it

    def close(self):
        if self._handle:
            _capi.check(getattr(self._lib, self._free)(self._handle))
            self._handle = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:  # at interpreter exit, or a model whose sessions are still alive
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Model(_Handle):
    """A loaded model directory. Immutable: usable from several threads at once. close()
    is refused (WrenError WREN_ERROR_IN_USE) while sessions over it live."""

    _free = "wren_model_free"

    def __init__(self, path):
        self._lib = _capi.lib()
        self._handle = ctypes.c_void_p()
        _capi.check(self._lib.wren_model_load(os.fsencode(path), ctypes.byref(self._handle)))
        info = _capi.ModelInfo()
        _capi.check(self._lib.wren_model_get_info(self._handle, ctypes.byref(info)))
        self.path = str(path)
        self.name = info.name.decode()
        self.vocab_size, self.n_logits, self.context_length = info.vocab_size, info.n_logits, info.context_length
        self.eos_token = info.eos_token if info.eos_token >= 0 else None

    def tokenize(self, text, special=True):
        """Token ids of `text`; special=True reads texts like <|endoftext|> as their ids."""
        data = text.encode()
        n = ctypes.c_size_t()
        st = self._lib.wren_tokenize(self._handle, data, len(data), int(special), None, 0, ctypes.byref(n))
        if st not in (0, _capi.BUFFER_TOO_SMALL):
            _capi.check(st)
        ids = (ctypes.c_int32 * n.value)()
        _capi.check(self._lib.wren_tokenize(self._handle, data, len(data), int(special), ids, n.value, ctypes.byref(n)))
        return list(ids)

    def detokenize(self, tokens):
        ids = (ctypes.c_int32 * len(tokens))(*tokens)
        n = ctypes.c_size_t()
        st = self._lib.wren_detokenize(self._handle, ids, len(tokens), None, 0, ctypes.byref(n))
        if st not in (0, _capi.BUFFER_TOO_SMALL):
            _capi.check(st)
        buf = ctypes.create_string_buffer(n.value)
        _capi.check(self._lib.wren_detokenize(self._handle, ids, len(tokens), buf, n.value, ctypes.byref(n)))
        return buf.raw[: n.value].decode("utf-8", errors="replace")

    def perplexity(self, text, context=0, threads=1):
        """Perplexity of `text` as `wren perplexity` measures it (windows of `context` tokens,
        0: min(context_length, 512); second halves scored). Bits per byte: perplexity_details."""
        return self.perplexity_details(text, context, threads)["perplexity"]

    def perplexity_details(self, text, context=0, threads=1):
        data = text.encode()
        r = _capi.PerplexityResult()
        _capi.check(self._lib.wren_perplexity(self._handle, data, len(data), context, threads, ctypes.byref(r)))
        return {"perplexity": r.perplexity, "bits_per_byte": r.bits_per_byte, "windows": r.windows, "scored": r.scored}

    def generate(self, prompt, max_tokens=128, temperature=0.8, stream=False, context=None, threads=1, **options):
        """`wren generate` in a fresh session: the generated text (without the prompt), or with
        stream=True an iterator of its pieces as they are produced. options: top_k, top_p,
        min_p, repeat_penalty, repeat_last_n, seed, stop (a list of strings), ignore_eos,
        early_exit. The session holds the prompt and max_tokens (context=None) or `context`."""
        need = len(self.tokenize(prompt)) + max_tokens + 1
        session = Session(self, context=context or min(self.context_length, need), threads=threads)
        return session.generate(prompt, max_tokens=max_tokens, temperature=temperature, stream=stream, **options)


class Session(_Handle):
    """One sequence over a model: caches, position, last logits, sampler. One thread at a
    time; sessions on one model run in parallel."""

    _free = "wren_session_free"

    def __init__(self, model, context=0, threads=1):
        self.model = model  # keeps the model alive as long as the session
        self._lib = model._lib
        params = self._lib.wren_session_default_params()
        params.context, params.threads = context, threads
        self._handle = ctypes.c_void_p()
        _capi.check(self._lib.wren_session_new(model._handle, ctypes.byref(params), ctypes.byref(self._handle)))
        self.result = None  # the last generate's: generated, stop_reason, pending_token

    def _info(self):
        info = _capi.SessionInfo()
        _capi.check(self._lib.wren_session_get_info(self._handle, ctypes.byref(info)))
        return info

    @property
    def position(self):
        return self._info().position

    @property
    def context(self):
        return self._info().context

    @property
    def history(self):
        p, n = ctypes.POINTER(ctypes.c_int32)(), ctypes.c_size_t()
        _capi.check(self._lib.wren_session_history(self._handle, ctypes.byref(p), ctypes.byref(n)))
        return list(p[: n.value])

    @property
    def logits(self):
        """The last evaluated token's logits (n_logits floats; padding rows -inf)."""
        p, n = ctypes.POINTER(ctypes.c_float)(), ctypes.c_size_t()
        _capi.check(self._lib.wren_session_logits(self._handle, ctypes.byref(p), ctypes.byref(n)))
        return _floats(p, n.value)

    def prefill(self, tokens, early_exit=True):
        """Evaluates prompt tokens; returns the last one's logits."""
        ids = (ctypes.c_int32 * len(tokens))(*tokens)
        _capi.check(self._lib.wren_session_prefill(self._handle, ids, len(tokens), int(early_exit), None, 0))
        return self.logits

    def decode(self, token):
        """Evaluates one token; returns its logits."""
        _capi.check(self._lib.wren_session_decode(self._handle, int(token), None, 0))
        return self.logits

    def set_sampler(self, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0, repeat_last_n=64,
                    seed=0):
        p = _sampler(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed)
        _capi.check(self._lib.wren_session_set_sampler(self._handle, ctypes.byref(p)))

    def sample(self):
        """The next token drawn from the last logits (not evaluated: pass it to decode)."""
        t = ctypes.c_int32()
        _capi.check(self._lib.wren_session_sample(self._handle, ctypes.byref(t)))
        return t.value

    def stats(self):
        """The counters `wren generate --stats` prints, as a dict."""
        s = _capi.Stats()
        _capi.check(self._lib.wren_session_get_stats(self._handle, ctypes.byref(s)))
        return {name: getattr(s, name) for name, _ in _capi.Stats._fields_}

    def save_state(self):
        n = ctypes.c_size_t()
        _capi.check(self._lib.wren_session_state_size(self._handle, ctypes.byref(n)))
        buf = ctypes.create_string_buffer(n.value)
        _capi.check(self._lib.wren_session_save_state(self._handle, buf, n.value, ctypes.byref(n)))
        return buf.raw[: n.value]

    def restore_state(self, data):
        _capi.check(self._lib.wren_session_restore_state(self._handle, data, len(data)))

    def save(self, path):
        _capi.check(self._lib.wren_session_save_file(self._handle, os.fsencode(path)))

    def restore(self, path):
        _capi.check(self._lib.wren_session_restore_file(self._handle, os.fsencode(path)))

    def generate(self, prompt, max_tokens=128, temperature=0.8, stream=False, top_k=40, top_p=0.95, min_p=0.05,
                 repeat_penalty=1.0, repeat_last_n=64, seed=0, stop=(), ignore_eos=False, early_exit=True):
        """`wren generate` at this session's position: the text, or an iterator of pieces."""
        params = self._lib.wren_generate_default_params()
        params.sampler = _sampler(temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed)
        params.max_tokens, params.ignore_eos, params.early_exit = max_tokens, int(ignore_eos), int(early_exit)
        stops = [s.encode() for s in stop]
        stop_array = (ctypes.c_char_p * max(1, len(stops)))(*stops)
        params.stops, params.n_stops = ctypes.cast(stop_array, ctypes.POINTER(ctypes.c_char_p)), len(stops)
        data = prompt.encode()
        if not stream:
            pieces = []
            self._run(data, params, stop_array, lambda piece: pieces.append(piece) or False)
            return b"".join(pieces).decode("utf-8", errors="replace")
        return self._stream(data, params, stop_array)

    def _run(self, data, params, keep_alive, on_piece):
        @_capi.StreamCallback
        def callback(text, length, user):
            return 1 if on_piece(ctypes.string_at(text, length)) else 0

        result = _capi.GenerateResult()
        _capi.check(self._lib.wren_generate(self._handle, data, len(data), ctypes.byref(params), callback, None,
                                            ctypes.byref(result)))
        self.result = {"generated": result.generated, "stop_reason": result.stop_reason,
                       "pending_token": result.pending_token if result.pending_token >= 0 else None}

    def _stream(self, data, params, keep_alive):
        # The generation runs in a thread (ctypes releases the GIL while it is in C); pieces
        # come through a queue; leaving the loop early stops the generation at the next piece.
        pieces, stop = queue.Queue(maxsize=64), threading.Event()
        failure = []

        def on_piece(piece):
            pieces.put(piece)
            return stop.is_set()

        def work():
            try:
                self._run(data, params, keep_alive, on_piece)
            except WrenError as e:
                failure.append(e)
            finally:
                pieces.put(None)

        worker = threading.Thread(target=work, daemon=True)
        worker.start()
        try:
            while (piece := pieces.get()) is not None:
                yield piece.decode("utf-8", errors="replace")  # whole characters: the library completes UTF-8
        finally:
            stop.set()
            while worker.is_alive():  # let a blocked put finish
                try:
                    pieces.get(timeout=0.05)
                except queue.Empty:
                    pass
            worker.join()
        if failure:
            raise failure[0]
