#!/usr/bin/env python3
"""Writes the report README.md (bench/results/vs-llama-server/ by default) from the <arch>.json files of bench/run-vs-llama-server.sh.

Usage: results_readme.py OUT_DIR ARCH... [--shape S] [--llama-server PATH] [--trace-args A]
       [--minutes N]
A hand-written OUT_DIR/analysis.md, when present, is linked from the report.
"""
import argparse
import json
import os
import platform
import subprocess


def pct(v):
    return "n/a" if v is None else f"{100 * v:.1f}%"


def output_cell(check):
    """The "output = cache off" cell from an <arch>-output-check.json (bench/output_check.py)."""
    if check is None:
        return ""
    bad = check["differ"] + check["missing"]
    return (f" {'equal' if not bad else 'DIFF'} ({check['equal']}/{check['requests']}) |")


def median_ttft_s(run):
    """The median client TTFT of one server's requests, in seconds ("n/a" without any)."""
    ttfts = sorted(r["ttft_ms"] for r in run.get("requests", []))
    if not ttfts:
        return "n/a"
    mid = len(ttfts) // 2
    med = ttfts[mid] if len(ttfts) % 2 else (ttfts[mid - 1] + ttfts[mid]) / 2
    return f"{med / 1000:.2f}"


def headline_row(arch, j, check=None):
    h = j["headline"]
    return (f"| {arch} | {pct(h['reuse_ratio_a'])} | {pct(h['reuse_ratio_b'])} | "
            f"{pct(h['reuse_ratio_after_restart_a'])} | {pct(h['reuse_ratio_after_restart_b'])} | "
            f"{h['ttft_ms_mean_a'] / 1000:.2f} | {h['ttft_ms_mean_b'] / 1000:.2f} | "
            f"{h['ttft_ratio_a_over_b']:.2f} | {median_ttft_s(j.get('a', {}))} | "
            f"{median_ttft_s(j.get('b', {}))} |{output_cell(check)}")


HEADER = ("| family | reuse prefixd | reuse llama-server | after restart prefixd | "
          "after restart llama-server | mean TTFT prefixd (s) | mean TTFT llama-server (s) | "
          "TTFT ratio | median TTFT prefixd (s) | median TTFT llama-server (s) |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
HEADER_CHECKED = HEADER.replace(" |\n|", " | prefixd output = cache off |\n|", 1) + "---|"


def targets(arch, h):
    out = []
    ok_reuse = (h["reuse_ratio_a"] or 0) >= 0.99
    ok_restart = (h["reuse_ratio_after_restart_a"] or 0) >= 0.99
    ok_ttft = h["requests_b_reprefilled_a_slower"] == 0
    out.append(f"| {arch} | {'met' if ok_reuse else 'MISSED'} ({pct(h['reuse_ratio_a'])}) | "
               f"{'met' if ok_restart else 'MISSED'} ({pct(h['reuse_ratio_after_restart_a'])}) | "
               f"{'met' if ok_ttft else 'MISSED'} ({h['requests_b_reprefilled_a_slower']} of "
               f"{h['requests_b_reprefilled']}) |")
    return out


def git_commit():
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True).strip()
    except Exception:
        return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("archs", nargs="+")
    ap.add_argument("--shape", default="small")
    ap.add_argument("--llama-server", default="llama-server")
    ap.add_argument("--trace-args", default="")
    ap.add_argument("--minutes", default="?")
    ap.add_argument("--prefixd-build", default=None, help="what the prefixd binary was built from")
    ap.add_argument("--command", action="append", default=[],
                    help="a command that produced these results (repeatable; listed in the report)")
    a = ap.parse_args()

    rows, target_rows, sections, notes = [], [], [], []
    checked = False
    for arch in a.archs:
        path = os.path.join(a.out, f"{arch}.json")
        if not os.path.exists(path):
            notes.append(f"- {arch}: no results (the run did not finish)")
            continue
        j = json.load(open(path))
        h = j["headline"]
        check_path = os.path.join(a.out, f"{arch}-output-check.json")
        check = json.load(open(check_path)) if os.path.exists(check_path) else None
        checked = checked or check is not None
        rows.append(headline_row(arch, j, check))
        rejected = [r["index"] for r in j.get("b", {}).get("requests", []) if r.get("answer_error")]
        if rejected:
            why = next(r["answer_error"] for r in j["b"]["requests"] if r.get("answer_error"))
            notes.append(f"- {arch}: {j['b'].get('label', 'B')} rejected its own answer to "
                         f"request(s) {rejected} after processing the prompt (\"{why}\"); their "
                         f"cached / evaluated tokens come from its first chunk's timings")
        target_rows += targets(arch, h)
        for n in h.get("notes", []):
            notes.append(f"- {arch}: {n}")
        md = open(os.path.join(a.out, f"{arch}.md")).read().split("\n", 1)[1]
        chart = f"![{arch}]({arch}.png)\n\n" if os.path.exists(os.path.join(a.out, f"{arch}.png")) else ""
        sections.append(f"## {arch}\n\n{chart}{md.strip()}\n\nprefixd's request log lines: "
                        f"[{arch}-prefixd-requests.log]({arch}-prefixd-requests.log)\n")

    commands = ("\nRun:\n\n```sh\n" + "\n".join(a.command) + "\n```\n") if a.command else ""
    header = HEADER_CHECKED if checked else HEADER
    if checked:  # a row without a check gets an empty cell
        rows = [r if r.count("|") == header.split("\n")[0].count("|") else r + " n/a |"
                for r in rows]
    analysis = ("\nFindings, explanations of misses and oddities: [analysis.md](analysis.md).\n"
                if os.path.exists(os.path.join(a.out, "analysis.md")) else "")
    text = f"""# prefixd vs llama-server on agent traces

Both servers measured in the same run of `bench/run-vs-llama-server.sh`, side by side (both
running; each request of the trace sent to one and then to the other, the order alternating) on
one machine ({platform.machine()}, {os.cpu_count()} CPU threads, shared with other work), with the
same generated `{a.shape}` test model per family, the same trace (`prefixd bench {a.trace_args}`),
2 slots, 8192 tokens of context per slot, 2 threads. llama-server is built from the same pinned
llama.cpp (de3ff81) and runs with its best caching flags (`--cache-ram 4096 --ctx-checkpoints 64
--checkpoint-min-step 0 --jinja`, plus `--swa-full` on SWA models; flash attention at its
default, `auto`, which is on for CPU; prefixd serve has it on by default too). prefixd:
{a.prefixd_build or 'commit ' + git_commit()};
the whole script took {a.minutes} min.

- **reuse** = cached / reusable tokens over the trace; *reusable* is the longest token prefix a
  prompt shares with any earlier prompt, capped at prompt − 1; *cached* is what the server
  reports (`usage.prompt_tokens_details.cached_tokens`).
- **after restart**: the same from the trace's restart marker on; the bench stops the server
  process and starts it again there (llama-server's cache lives in RAM only).
- **TTFT**: client-measured time to the first streamed chunk; TTFT ratio = mean prefixd /
  mean llama-server. On a loaded shared machine one request can take seconds longer than its
  neighbours on either server; the median is the steadier figure.
- **prefixd output = cache off** (with `--check-output`): the trace replayed once more against
  `prefixd serve --no-cache`; equal when every greedy streamed answer (reasoning, content and
  tool calls) is the same text as with the cache on (`bench/output_check.py`).

{header}
{chr(10).join(rows)}

## Targets

| family | prefixd reuse ≥ 99% | after restart ≥ 99% | TTFT ≤ llama-server's where llama-server re-prefilled (slower on / re-prefilled) |
|---|---|---|---|
{chr(10).join(target_rows)}

"Re-prefilled": llama-server evaluated at least 256 more tokens than the non-reusable part of the
prompt.
{analysis}
{chr(10).join(notes)}
{commands}
{chr(10).join(sections)}
"""
    open(os.path.join(a.out, "README.md"), "w").write(text)
    open(os.path.join(a.out, "headline.md"), "w").write(header + "\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
