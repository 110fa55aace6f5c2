#!/usr/bin/env python3
"""Unit tests of bench/output_check.py: answers compared request by request. No server."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import output_check  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def write_run(path, outputs):
    rows = [{"index": i, "output": o} if o is not None else {"index": i}
            for i, o in enumerate(outputs)]
    with open(path, "w") as f:
        json.dump({"requests": rows}, f)


class OutputCheckTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.on = os.path.join(self.dir.name, "on.json")
        self.off = os.path.join(self.dir.name, "off.json")

    def tearDown(self):
        self.dir.cleanup()

    def run_check(self):
        out = os.path.join(self.dir.name, "check.json")
        rc = subprocess.run([sys.executable, os.path.join(HERE, "output_check.py"), self.on,
                             self.off, "--out", out], capture_output=True).returncode
        return rc, json.load(open(out))

    def test_equal_answers(self):
        write_run(self.on, ["a", "b<think>x</think>", '[{"id":"1"}]'])
        write_run(self.off, ["a", "b<think>x</think>", '[{"id":"1"}]'])
        rc, check = self.run_check()
        self.assertEqual(rc, 0)
        self.assertEqual(check, {"requests": 3, "equal": 3, "differ": [], "missing": []})

    def test_a_different_or_missing_answer_fails(self):
        write_run(self.on, ["a", "b", "c", None])
        write_run(self.off, ["a", "B", "c", "d"])
        rc, check = self.run_check()
        self.assertEqual(rc, 3)
        self.assertEqual(check["differ"], [1])
        self.assertEqual(check["missing"], [3])
        self.assertEqual(check["equal"], 2)

    def test_a_request_only_one_run_has_is_missing(self):
        check = output_check.compare({0: "a", 1: "b"}, {0: "a"})
        self.assertEqual(check["missing"], [1])


if __name__ == "__main__":
    unittest.main()
