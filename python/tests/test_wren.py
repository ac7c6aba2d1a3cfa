"""The Python module against the `wren` binary (the oracle) and against itself: greedy text
equals `wren generate`'s, perplexity equals `wren perplexity`'s, step-by-step equals one
call, two threads equal one after the other, a restored state continues identically, and
bad arguments raise WrenError with the library's message. Run by ctest (python_wren) with
WREN_LIBRARY, WREN_BINARY and WREN_SOURCE_DIR set."""
import os
import pathlib
import subprocess
import tempfile
import threading
import unittest

import wren

SOURCE = pathlib.Path(os.environ.get("WREN_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
MODEL = str(SOURCE / "models" / "embla-small")
BINARY = os.environ.get("WREN_BINARY", str(SOURCE / "build" / "wren"))


def cli(*args):
    return subprocess.run([BINARY, *args], check=True, capture_output=True, text=True).stdout


class ModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = wren.Model(MODEL)

    def test_greedy_generate_equals_wren_generate(self):
        for prompt in ["It was a dark and stormy night", "Once upon a time"]:
            with self.subTest(prompt=prompt):
                text = self.model.generate(prompt, max_tokens=40, temperature=0)
                self.assertTrue(text)
                self.assertEqual(prompt + text + "\n", cli("generate", "-m", MODEL, prompt, "-n", "40", "--temp", "0"))

    def test_sampled_generate_equals_wren_generate(self):
        prompt = "The little bird"
        text = self.model.generate(prompt, max_tokens=30, temperature=0.9, seed=3)
        self.assertEqual(prompt + text + "\n",
                         cli("generate", "-m", MODEL, prompt, "-n", "30", "--temp", "0.9", "--seed", "3"))

    def test_stream_yields_the_same_text_in_pieces(self):
        prompt = "It was a dark and stormy night"
        whole = self.model.generate(prompt, max_tokens=30, temperature=0)
        pieces = list(self.model.generate(prompt, max_tokens=30, temperature=0, stream=True))
        self.assertGreater(len(pieces), 5)
        self.assertEqual("".join(pieces), whole)
        # Leaving the loop early stops the generation; a prefix of the text came out.
        first = []
        for piece in self.model.generate(prompt, max_tokens=30, temperature=0, stream=True):
            first.append(piece)
            if len(first) == 3:
                break
        self.assertTrue(whole.startswith("".join(first)))

    def test_tokenize_round_trip(self):
        text = "Hello, world: caf\u00e9 <|endoftext|>"
        ids = self.model.tokenize(text)
        self.assertEqual(ids[-1], self.model.eos_token)
        self.assertGreater(len(self.model.tokenize(text, special=False)), len(ids))
        self.assertEqual(self.model.detokenize(ids), text)

    def test_perplexity_equals_wren_perplexity(self):
        text = "The quick brown fox jumps over the lazy dog, and the bird sings. " * 40
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.txt")
            with open(path, "w") as f:
                f.write(text)
            out = cli("perplexity", "-m", MODEL, path, "-c", "64", "-t", "1")
        details = self.model.perplexity_details(text, context=64)
        self.assertIn(f"perplexity {details['perplexity']:.4f}\nbits per byte {details['bits_per_byte']:.4f}\n", out)
        self.assertEqual(self.model.perplexity(text, context=64), details["perplexity"])

    def test_errors_carry_the_librarys_message(self):
        with self.assertRaises(wren.WrenError) as e:
            wren.Model("/nonexistent/model")
        self.assertEqual(e.exception.name, "WREN_ERROR_IO")
        self.assertIn("/nonexistent/model", str(e.exception))
        with self.assertRaises(wren.WrenError) as e:
            self.model.detokenize([self.model.vocab_size])
        self.assertEqual(e.exception.name, "WREN_ERROR_TOKEN")
        with self.assertRaises(wren.WrenError) as e:
            self.model.generate("Once upon a time", max_tokens=50, context=16)
        self.assertEqual(e.exception.name, "WREN_ERROR_CONTEXT_FULL")
        with self.assertRaises(wren.WrenError) as e:
            self.model.perplexity("short", context=64)
        self.assertIn("fewer than one window", e.exception.message)


class SessionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = wren.Model(MODEL)

    def test_step_by_step_equals_generate(self):
        prompt = "It was a dark and stormy night"
        whole = wren.Session(self.model, context=128)
        text = whole.generate(prompt, max_tokens=20, temperature=0)
        s = wren.Session(self.model, context=128)
        s.set_sampler(temperature=0)
        logits = s.prefill(self.model.tokenize(prompt))
        self.assertEqual(len(logits), self.model.n_logits)
        out = []
        for i in range(20):
            t = s.sample()
            self.assertEqual(t, max(range(len(logits)), key=lambda j: logits[j]))
            out.append(t)
            if i < 19:
                logits = s.decode(t)
        self.assertEqual(self.model.detokenize(out), text)
        self.assertEqual(whole.result["pending_token"], out[-1])
        self.assertEqual(s.history, whole.history)
        self.assertEqual(s.stats()["decode_steps"], 19)

    def test_logits_are_numpy_when_numpy_is_there(self):
        s = wren.Session(self.model, context=32)
        logits = s.prefill([5, 6, 7])
        if wren._np is not None:
            self.assertIsInstance(logits, wren._np.ndarray)
            self.assertEqual(logits.dtype, wren._np.float32)
        saved, wren._np = wren._np, None
        try:
            plain = s.logits
        finally:
            wren._np = saved
        self.assertIsInstance(plain, list)
        self.assertEqual([float(x) for x in logits], plain)

    def _run(self, prompt, seed):
        s = wren.Session(self.model, context=128, threads=2)
        s.set_sampler(temperature=1.0, seed=seed)
        s.prefill(self.model.tokenize(prompt))
        tokens = []
        for _ in range(12):
            tokens.append(s.sample())
            s.decode(tokens[-1])
        return tokens, list(s.logits), s.generate(" And", max_tokens=12, temperature=0.7, seed=seed)

    def test_two_threads_equal_one_after_the_other(self):
        a, b = self._run("Once upon a time", 1), self._run("It was a dark and stormy night", 2)
        self.assertNotEqual(a, b)
        results = {}
        threads = [threading.Thread(target=lambda k=k, p=p, seed=seed: results.__setitem__(k, self._run(p, seed)))
                   for k, p, seed in [("a", "Once upon a time", 1), ("b", "It was a dark and stormy night", 2)]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(results["a"], a)
        self.assertEqual(results["b"], b)

    def test_saved_state_continues_identically(self):
        s = wren.Session(self.model, context=96)
        s.set_sampler(temperature=1.0, seed=4)
        s.prefill(self.model.tokenize("It was a dark and stormy night"))
        for _ in range(3):
            s.decode(s.sample())
        state = s.save_state()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "s.state")
            s.save(path)
            want = self._continue(s)
            for restore in (lambda o: o.restore_state(state), lambda o: o.restore(path)):
                other = wren.Session(self.model, context=96)
                other.set_sampler(temperature=1.0, seed=99)
                other.prefill(self.model.tokenize("Something else"))
                restore(other)
                self.assertEqual(self._continue(other), want)
        wider = wren.Session(self.model, context=128)
        with self.assertRaises(wren.WrenError) as e:
            wider.restore_state(state)
        self.assertEqual(e.exception.name, "WREN_ERROR_STATE")
        self.assertIn("context 96", e.exception.message)

    @staticmethod
    def _continue(s):
        tokens = []
        for _ in range(10):
            tokens.append(s.sample())
            s.decode(tokens[-1])
        return tokens, list(s.logits)

    def test_model_is_not_freed_under_a_session(self):
        model = wren.Model(MODEL)
        s = wren.Session(model, context=16)
        with self.assertRaises(wren.WrenError) as e:
            model.close()
        self.assertEqual(e.exception.name, "WREN_ERROR_IN_USE")
        s.prefill([5, 6])  # still works
        s.close()
        model.close()

    def test_bad_arguments(self):
        s = wren.Session(self.model, context=8)
        for call, name in [(lambda: s.decode(-1), "WREN_ERROR_TOKEN"), (lambda: s.prefill([5] * 9), "WREN_ERROR_CONTEXT_FULL"),
                           (lambda: s.sample(), "WREN_ERROR_NO_LOGITS"), (lambda: s.prefill([]), "WREN_ERROR_ARGUMENT"),
                           (lambda: s.set_sampler(top_p=0), "WREN_ERROR_ARGUMENT"),
                           (lambda: s.restore_state(b"garbage" * 10), "WREN_ERROR_STATE"),
                           (lambda: wren.Session(self.model, context=10 ** 9), "WREN_ERROR_ARGUMENT")]:
            with self.assertRaises(wren.WrenError) as e:
                call()
            self.assertEqual(e.exception.name, name)
            self.assertTrue(e.exception.message)
        self.assertEqual(s.position, 0)


if __name__ == "__main__":
    unittest.main()
