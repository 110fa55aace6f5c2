#!/usr/bin/env python3
"""Unit tests of bench/soak_table.py: the verdict's RSS bound and slope, the disk check, the
table. No server, no model."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soak_table as soak  # noqa: E402

MIB = 1 << 20


def rounds(rss_mib, files_mib=100, quota_mib=128, index_mib=2):
    return [{"round": i + 1, "seconds": 10, "rss_bytes": int(r * MIB),
             "heap_in_use_bytes": 50 * MIB, "owners": {"ram_tier": 64 * MIB},
             "disk_records_bytes": int((files_mib - index_mib) * MIB),
             "disk_index_bytes": int(index_mib * MIB), "disk_quota_bytes": quota_mib * MIB,
             "cache_dir_file_bytes": int(files_mib * MIB)} for i, r in enumerate(rss_mib)]


class SoakTableTest(unittest.TestCase):
    def test_flat_after_warmup_holds(self):
        v = soak.verdict(rounds([150, 200, 205, 203, 206, 204]), 2, 16, 1)
        self.assertTrue(v["rss_flat"])
        self.assertAlmostEqual(v["rss_max_rise_mib"], 6)
        self.assertTrue(v["holds"])

    def test_a_steady_climb_is_not_flat_even_within_the_bound(self):
        v = soak.verdict(rounds([150, 200, 202, 204, 206, 208, 210]), 2, 16, 1)
        self.assertLess(v["rss_max_rise_mib"], 16)
        self.assertAlmostEqual(v["rss_slope_mib_per_round"], 2)
        self.assertFalse(v["rss_flat"])
        self.assertFalse(v["holds"])

    def test_a_jump_past_the_bound_is_not_flat(self):
        self.assertFalse(soak.verdict(rounds([150, 200, 200, 230, 200]), 2, 16, 100)["rss_flat"])

    def test_disk_over_the_quota_fails(self):
        v = soak.verdict(rounds([100, 100, 100], files_mib=129), 1, 16, 1)
        self.assertFalse(v["disk_within_quota"])
        self.assertFalse(v["holds"])

    def test_too_few_rounds_say_so(self):
        v = soak.verdict(rounds([100, 100]), 2, 16, 1)
        self.assertIsNone(v["rss_flat"])
        self.assertFalse(v["holds"])

    def test_markdown_has_a_row_per_round_and_the_owners(self):
        md = soak.markdown(rounds([100, 101, 101.5]), soak.verdict(rounds([100, 101, 101.5]), 1, 16, 1),
                           "t", "cmd")
        self.assertIn("| ram_tier |", md)
        self.assertIn("| 3 | 10 | 101.5 |", md)
        self.assertIn("**flat**", md)
        self.assertIn("**within**", md)


if __name__ == "__main__":
    unittest.main()
