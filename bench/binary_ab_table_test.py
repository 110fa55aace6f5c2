#!/usr/bin/env python3
"""Unit tests of bench/binary_ab_table.py: request-log lines to the side-by-side table.
No server, no model."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import binary_ab_table as ab  # noqa: E402


def log_line(prompt, captures, capture_ms, publish_ms):
    return (f"2026-12-05T12:00:00Z info chat POST /v1/chat/completions 200 prompt_tokens={prompt} "
            f"cached=0 evaluated={prompt} completion=16 tier=none finish=length queue_ms=1.0 "
            f"prefetch_ms=0.1 prefill_ms=9.0 decode_ms=2.0 restore_ms=0.5 restored_bytes=0 "
            f"eval_ms=8.0 chunks=1 captures={captures} capture_ms={capture_ms} "
            f"publish_ms={publish_ms}\n")


class BinaryAbTableTest(unittest.TestCase):
    def write(self, name, lines):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write("2026-12-05T12:00:00Z info listening on 127.0.0.1:8080\n")
            f.writelines(lines)
        return path

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def test_warm_up_left_out_and_sums(self):
        a = self.write("a.log", [log_line(21, 1, 2.0, 0.0), log_line(4000, 8, 300.0, 700.0),
                                 log_line(5500, 5, 20.4, 30.0)])
        b = self.write("b.log", [log_line(21, 1, 2.0, 0.0), log_line(4000, 8, 310.0, 690.0),
                                 log_line(5500, 5, 120.0, 90.0)])
        ra, rb = ab.requests(a), ab.requests(b)
        self.assertEqual([r["prompt_tokens"] for r in ra], [4000, 5500])
        text = ab.table(ra, rb, "t")
        self.assertIn("| 2 | 5500 | 5500 | 5 | 20.4 | 120.0 | 30.0 | 90.0 |", text)
        self.assertIn("| sum |  |  |  | **320** | **430** | **730** | **780** |", text)
        self.assertNotIn("differ in length", text)

    def test_lengths_that_differ_are_said(self):
        a = self.write("a.log", [log_line(21, 1, 2.0, 0.0), log_line(4000, 8, 1.0, 1.0)])
        b = self.write("b.log", [log_line(21, 1, 2.0, 0.0)])
        self.assertEqual(ab.requests(b), [])
        text = ab.table(ab.requests(a), [], "t")
        self.assertIn("A 1 requests, B 0", text)


if __name__ == "__main__":
    unittest.main()
