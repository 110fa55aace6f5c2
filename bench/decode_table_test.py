#!/usr/bin/env python3
"""Unit tests of bench/decode_table.py: medians over rounds, ratios and the floors.
No server, no model."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode_table as table  # noqa: E402


def write_run(folder, shape, label, rnd, one_stream, two_streams):
    run = {"label": label, "max_tokens": 64, "reps": 1, "results": [
        {"streams": 1, "tokens_per_s": one_stream},
        {"streams": 2, "tokens_per_s": two_streams}]}
    with open(os.path.join(folder, f"run-{shape}-{label}-{rnd}.json"), "w") as f:
        json.dump(run, f)


class DecodeTableTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        for rnd, (on, off, ls) in enumerate([(100, 100, 100), (90, 110, 80), (300, 104, 96)]):
            write_run(d, "tiny", "prefixd", rnd, on, on * 2)
            write_run(d, "tiny", "prefixd-no-cache", rnd, off, off * 2)
            write_run(d, "tiny", "llama-server", rnd, ls, 300)
        write_run(d, "tiny", "unknown-label", 0, 1, 1)  # ignored: not one of the three servers

    def tearDown(self):
        self.dir.cleanup()

    def rows(self):
        return {r["streams"]: r for r in table.summarize(*table.collect(self.dir.name))}

    def test_medians_over_rounds(self):
        row = self.rows()[1]
        self.assertEqual(row["rounds"], 3)
        self.assertEqual(row["tokens_per_s"],
                         {"prefixd": 100, "prefixd-no-cache": 104, "llama-server": 96})

    def test_ratios_and_floors(self):
        one, two = self.rows()[1], self.rows()[2]
        self.assertAlmostEqual(one["ratio_to_prefixd-no-cache"], 100 / 104)
        self.assertFalse(one["meets_prefixd-no-cache"])   # 0.96 < 0.97
        self.assertTrue(one["meets_llama-server"])         # 1.04 >= 0.95
        self.assertAlmostEqual(two["ratio_to_llama-server"], 200 / 300)
        self.assertFalse(two["meets_llama-server"])

    def test_markdown_marks_what_is_below(self):
        md = table.markdown(table.summarize(*table.collect(self.dir.name)))
        self.assertIn("| qwen35 tiny | 1 | 64 | 3 | 100.0 | 104.0 | 96.0 | 0.962 (below) | 1.042 |", md)


if __name__ == "__main__":
    unittest.main()
