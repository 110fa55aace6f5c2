#!/usr/bin/env python3
"""Unit tests of the architecture sweep's bookkeeping (bench/arch_sweep.py): the trace, the
reuse classes, what fails the sweep and the doc rewrite. No server, no model."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch_sweep as sweep  # noqa: E402


def row(cached, reusable):
    return {"cached": cached, "reusable": reusable, "text": "", "prompt": reusable + 1}


def ok(arch, equal=True, reuse="full"):
    return {"model": arch + "-dense", "arch": arch, "status": "ok", "equal": equal,
            "reuse": reuse, "detail": "" if equal else "output differs on request(s) [1]"}


class TraceTest(unittest.TestCase):
    def test_words_are_one_test_token_each(self):
        text = sweep.words("q", 0, 4096)
        self.assertEqual(len(text), 5 * 4096)  # 5 characters: one token of the test tokenizer

    def test_trace_shares_prefixes_and_fits_the_trained_context(self):
        p = sweep.trace()
        self.assertEqual(len(p), 5)
        self.assertTrue(p[1].startswith(p[0]))          # turns appended
        self.assertTrue(p[4].startswith(p[1]))          # the session continues
        self.assertFalse(p[2].startswith(p[1]))         # a branch
        self.assertTrue(all(len(x) // 5 + sweep.MAX_TOKENS < sweep.TRAINED_CTX for x in p))


class ClassifyTest(unittest.TestCase):
    def test_classes(self):
        b = sweep.BLOCK
        self.assertEqual(sweep.classify([row(0, 0), row(140, 140)]), "full")
        self.assertEqual(sweep.classify([row(0, 0), row(b * 2, b * 2 + 10)]), "ceiling")
        self.assertEqual(sweep.classify([row(0, 0), row(b, b * 2 + 10)]), "below")
        self.assertEqual(sweep.classify([row(0, 0), row(0, 140)]), "inert")


class FailureTest(unittest.TestCase):
    def test_what_fails(self):
        self.assertIsNone(sweep.failure_of(ok("llama")))
        self.assertIsNotNone(sweep.failure_of(ok("qwen4exp", reuse="inert")))
        self.assertIsNotNone(sweep.failure_of(ok("deepseek2", reuse="below")))
        self.assertIsNone(sweep.failure_of(ok("mamba2", reuse="ceiling")))
        self.assertIsNone(sweep.failure_of(ok("cogvlm", equal=False)))      # allowlisted
        self.assertIsNotNone(sweep.failure_of(ok("llama", equal=False)))
        crashed = {"model": "gpt2-dense", "arch": "gpt2", "status": "crashed", "detail": "x"}
        self.assertIsNotNone(sweep.failure_of(crashed))
        refused = {"model": "dream-dense", "arch": "dream", "status": "refused", "detail": "x"}
        self.assertIsNone(sweep.failure_of(refused))
        refused.update(model="llama-dense", arch="llama")
        self.assertIsNotNone(sweep.failure_of(refused))

    def test_summary_counts(self):
        results = [ok("llama"), ok("mamba2", reuse="ceiling"), ok("cogvlm", equal=False),
                   {"model": "dream-dense", "arch": "dream", "status": "refused", "detail": ""}]
        line = sweep.summary_line(results)
        self.assertIn("4 models: 2 full reuse, 1 at the block ceiling", line)
        self.assertIn("1 refused at load, 0 crashed, 0 output mismatches (+1 allowed)", line)


class DocTest(unittest.TestCase):
    def test_only_the_generated_section_is_rewritten(self):
        with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
            f.write("intro\n<!-- arch-sweep:begin -->\nold\n<!-- arch-sweep:end -->\ntail\n")
        try:
            sweep.write_doc(f.name, "new\n")
            with open(f.name) as g:
                self.assertEqual(g.read(), "intro\n<!-- arch-sweep:begin -->\nnew\n"
                                           "<!-- arch-sweep:end -->\ntail\n")
        finally:
            os.unlink(f.name)


if __name__ == "__main__":
    unittest.main()
