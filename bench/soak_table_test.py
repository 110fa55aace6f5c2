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

    def budgeted(self, ram_mib, pool_mib, rest_mib, ram_budget_mib=2048, pool_limit_mib=512):
        rs = rounds([a + b + c for a, b, c in zip(ram_mib, pool_mib, rest_mib)])
        for r, ram, pool in zip(rs, ram_mib, pool_mib):
            r["owners"] = {"ram_tier": int(ram * MIB), "buffer_pool": int(pool * MIB)}
            r["ram_budget_bytes"] = ram_budget_mib * MIB
            r["buffer_pool_limit_bytes"] = pool_limit_mib * MIB
        return rs

    def test_owners_moving_by_whole_records_within_their_budgets_hold(self):
        # The RAM tier swings by a 20 MiB record under its budget: RSS alone passes the bound,
        # the rest of the process is flat.
        rs = self.budgeted([2000, 2030, 2005, 2040, 2010, 2045], [500] * 6,
                           [4900, 4901, 4902, 4901, 4903, 4902])
        v = soak.verdict(rs, 2, 16, 1)
        self.assertFalse(v["rss_flat"])
        self.assertTrue(v["owners_within_budgets"])
        self.assertLess(v["unbudgeted_max_rise_mib"], 16)
        self.assertTrue(v["unbudgeted_flat"])
        self.assertTrue(v["holds"])

    def test_an_owner_over_its_budget_fails_the_budget_rule(self):
        rs = self.budgeted([2000, 2030, 2005, 2060, 2010, 2045], [500] * 6,
                           [4900, 4901, 4902, 4901, 4903, 4902], ram_budget_mib=2048)
        v = soak.verdict(rs, 2, 16, 1)
        self.assertFalse(v["owners_within_budgets"])
        self.assertIn("ram_tier", v["budget_problem"])
        self.assertIn("round 4", v["budget_problem"])
        self.assertFalse(v["unbudgeted_flat"])
        self.assertFalse(v["holds"])

    def test_the_rest_climbing_fails_the_budget_rule(self):
        rs = self.budgeted([2000] * 7, [500] * 7, [4900, 4910, 4912, 4914, 4916, 4918, 4920])
        v = soak.verdict(rs, 2, 16, 1)
        self.assertTrue(v["owners_within_budgets"])
        self.assertAlmostEqual(v["unbudgeted_slope_mib_per_round"], 2)
        self.assertFalse(v["unbudgeted_flat"])
        self.assertFalse(v["holds"])

    def test_budgets_unknown_fail_unless_given(self):
        rs = self.budgeted([2000, 2030, 2005, 2040, 2010], [500] * 5, [4900] * 5)
        for r in rs:
            del r["ram_budget_bytes"], r["buffer_pool_limit_bytes"]
        self.assertFalse(soak.verdict(rs, 2, 16, 1)["unbudgeted_flat"])
        given = {"ram_budget_bytes": 2048 * MIB, "buffer_pool_limit_bytes": 512 * MIB}
        self.assertTrue(soak.verdict(rs, 2, 16, 1, given)["unbudgeted_flat"])

    def test_markdown_has_a_row_per_round_and_the_owners(self):
        md = soak.markdown(rounds([100, 101, 101.5]), soak.verdict(rounds([100, 101, 101.5]), 1, 16, 1),
                           "t", "cmd")
        self.assertIn("| ram_tier |", md)
        self.assertIn("| 3 | 10 | 101.5 |", md)
        self.assertIn("**flat**", md)
        self.assertIn("**within**", md)


if __name__ == "__main__":
    unittest.main()
