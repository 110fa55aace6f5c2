#!/usr/bin/env python3
"""Unit tests of bench/image_session.py: the PNG it writes, the scenario's shape, the count of
llama-server's image encodes from its log, the per-turn table. No server, no model."""
import os
import struct
import sys
import unittest
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import image_session as bench  # noqa: E402


def png_chunks(data):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, out = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        out.append((kind, body, crc == zlib.crc32(kind + body) & 0xffffffff))
        pos += 12 + n
    return out


def result(ttfts_p, ttfts_l, counts_p, counts_l):
    """A fake `run` result of one turn per entry, one round per TTFT."""
    def rows(ttft, counts):
        return [{"turn": f"A{i + 1}", "what": "x", "ttft_ms": t, "prompt": c[0],
                 "evaluated": c[1], "images_encoded": c[2]} for i, (t, c) in enumerate(zip(ttft, counts))]
    runs = [{"prefixd": rows(tp, counts_p), "llama-server": rows(tl, counts_l)}
            for tp, tl in zip(ttfts_p, ttfts_l)]
    return {"arch": "gemma3", "shape": "tiny", "image": "640x480 PNG", "runs": runs}


class ImageSessionTest(unittest.TestCase):
    def test_png_is_valid_and_stable(self):
        data = bench.screenshot_png(64, 48)
        chunks = png_chunks(data)
        self.assertEqual([c[0] for c in chunks], [b"IHDR", b"IDAT", b"IEND"])
        self.assertTrue(all(c[2] for c in chunks), "every CRC matches")
        w, h, depth, color = struct.unpack(">IIBB", chunks[0][1][:10])
        self.assertEqual((w, h, depth, color), (64, 48, 8, 2))
        raw = zlib.decompress(chunks[1][1])
        self.assertEqual(len(raw), 48 * (1 + 64 * 3))
        self.assertEqual(data, bench.screenshot_png(64, 48))
        self.assertGreater(len(set(raw)), 8, "a pattern, not a flat image")

    def test_scenario_shape(self):
        steps = bench.scenario("data:image/png;base64,AAAA")
        self.assertEqual([s[0] for s in steps],
                         [f"A{i}" for i in range(1, 9)] + ["B1", "B2", "A9"])
        self.assertEqual([s[3] for s in steps], [False] * 10 + [True])
        by_turn = {s[0]: s[2] for s in steps}
        # each turn of a conversation extends the one before it
        for conv, turns in (("A", range(1, 10)), ("B", range(1, 3))):
            for t in turns[1:]:
                prev, cur = by_turn[f"{conv}{t - 1}"], by_turn[f"{conv}{t}"]
                self.assertEqual(cur[:len(prev)], prev)
                self.assertGreater(len(cur), len(prev))
        images = lambda msgs: sum(1 for m in msgs if isinstance(m["content"], list)
                                  for p in m["content"] if p["type"] == "image_url")
        self.assertEqual(images(by_turn["A1"]), 0)
        self.assertEqual(images(by_turn["A2"]), 1)
        self.assertEqual(images(by_turn["A9"]), 1)
        self.assertEqual(images(by_turn["B1"]), 1)
        self.assertEqual(by_turn["A1"][0], by_turn["B1"][0], "the same system prompt")

    def test_llama_encodes_from_log(self):
        log = ("slot process_mtmd_chunk: id  0 | task 3 | encoding mtmd batch from idx = 120, n_chunks = 1\n"
               "image decoded (batch 1/1) in 12 ms\n"
               "slot process_mtmd_chunk: id  1 | task 9 | encoding mtmd batch from idx = 7, n_chunks = 2\n")
        self.assertEqual(bench.llama_images_encoded(log), 3)
        self.assertEqual(bench.llama_images_encoded("image decoded (batch 1/1) in 12 ms\n"), 0)

    def test_evaluated_tokens(self):
        res = {"usage": {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 60}},
               "timings": {"prompt_n": 30, "cache_n": 70}}
        self.assertEqual(bench.evaluated_tokens("prefixd", res), 40)
        self.assertEqual(bench.evaluated_tokens("llama-server", res), 30)

    def test_table_medians_totals_and_differing_rounds(self):
        r = result(ttfts_p=[[100, 10, 30], [300, 20, 10], [200, 30, 20]],
                   ttfts_l=[[100, 40, 10], [100, 40, 10], [100, 40, 10]],
                   counts_p=[(10, 10, 0), (20, 10, 1), (30, 10, 0)],
                   counts_l=[(10, 10, 0), (20, 20, 1), (30, 30, 1)])
        r["runs"][2]["llama-server"][2]["images_encoded"] = 0
        lines = bench.table(r)
        text = "\n".join(lines)
        self.assertIn("| A1 | x | 10 | 200 | 100 | 2.00 | 10 | 10 | 0 | 0 |", text)
        self.assertIn("| A2 | x | 20 | 20 | 40 | 0.50 | 10 | 20 | 1 | 1 |", text)
        self.assertIn("| all | | | | | | 30 | 60 | 1 | 2 |", text)
        self.assertIn("above llama-server's: A3.", text)
        self.assertIn("llama-server A3 round 3: prompt 30, evaluated 30, images_encoded 0", text)


if __name__ == "__main__":
    unittest.main()
