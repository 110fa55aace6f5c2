#!/usr/bin/env python3
"""The soak bench's report (bench/run-soak.sh): the rounds as a table, a text chart of RSS and
the cache dir per round, and the verdict.

Verdict (docs/bench.md, "Soak"):
  * RSS flat after warm-up: over the rounds after the first `warmup`, RSS moves by less than
    `bound_mib` from the last warm-up round's (the most above it, the least below it), and
    its least-squares slope over those rounds is below `slope_mib` per round;
  * or, where the memos still fill toward their documented caps (render_memo, token_memo:
    docs/http-api.md, "Memory over weeks"), RSS less what they hold passes the same rule: the
    rest of the process is flat and the memos are bounded by constants, not by traffic;
  * or RSS less every owner a budget bounds (the memos, ram_tier, buffer_pool) passes the same
    rule while ram_tier stays within --ram-budget and buffer_pool within its limit after every
    round: those two move by whole records (a Snapshot of the small model is ~20 MB, more than
    `bound_mib`), so their own budgets bound them, not the rule's 16 MiB;
  * disk: the disk tier's files (records + index, as the server counts them) stay within
    --disk-quota after every round, and so do the cache dir's files, whatever else is there.

Usage: soak_table.py ROUNDS.jsonl [--warmup 2] [--bound-mib 16] [--slope-mib 1]
       [--ram-budget-mib M] [--pool-limit-mib M]
       [--title T] [--command C] [--md OUT.md] [--json OUT.json]
The budgets come from each round's record (ram_budget_bytes, buffer_pool_limit_bytes, from
/metrics); the flags stand in for rounds recorded before the server reported them.
Exit code 0 when the verdict holds, 1 otherwise."""
import argparse
import json
import sys

MIB = float(1 << 20)


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def slope(ys):
    """Least-squares slope of ys against 0, 1, 2, ... (0 for fewer than two points)."""
    n = len(ys)
    if n < 2:
        return 0.0
    mx = (n - 1) / 2
    my = sum(ys) / n
    num = sum((i - mx) * (y - my) for i, y in enumerate(ys))
    den = sum((i - mx) ** 2 for i in range(n))
    return num / den


MEMOS = ("render_memo", "token_memo")  # owners that fill toward documented constant caps
# Owners bounded by a budget of their own, checked against it round by round.
BUDGETED = {"ram_tier": "ram_budget_bytes", "buffer_pool": "buffer_pool_limit_bytes"}


def flat(series, warmup, bound_mib, slope_mib):
    """The rule on one series of byte counts: (rise, drop, slope, holds) after the warm-up."""
    after = series[warmup:]
    base = series[warmup - 1]
    up = max(0, max(after) - base) / MIB
    down = max(0, base - min(after)) / MIB
    per_round = slope([x / MIB for x in after])
    return base, up, down, per_round, up < bound_mib and down < bound_mib and per_round < slope_mib


def owner(r, name):
    return r.get("owners", {}).get(name, 0)


def within_budgets(rounds, fallback):
    """(True, "") when every budgeted owner stays within its budget after every round; else
    (False, why). An owner whose budget no round records nor `fallback` gives fails."""
    for name, key in BUDGETED.items():
        for r in rounds:
            budget = r.get(key) or fallback.get(key)
            if not budget:
                return False, f"no budget known for {name}"
            if owner(r, name) > budget:
                return False, (f"{name} {owner(r, name) / MIB:.1f} MiB over its budget "
                               f"{budget / MIB:.1f} MiB in round {r['round']}")
    return True, ""


def verdict(rounds, warmup, bound_mib, slope_mib, budgets=None):
    """`budgets`: {"ram_budget_bytes": .., "buffer_pool_limit_bytes": ..} for rounds that do
    not record them."""
    v = {"warmup_rounds": warmup, "bound_mib": bound_mib, "slope_bound_mib": slope_mib}
    if not 0 < warmup < len(rounds):
        v.update(rss_flat=None, reason="not enough rounds after the warm-up")
    else:
        base, up, down, per_round, ok = flat([r["rss_bytes"] for r in rounds], warmup, bound_mib,
                                             slope_mib)
        v.update(rss_after_warmup_mib=base / MIB, rss_max_rise_mib=up, rss_max_drop_mib=down,
                 rss_slope_mib_per_round=per_round, rss_flat=ok)
        memos = [sum(r.get("owners", {}).get(m, 0) for m in MEMOS) for r in rounds]
        _, up, down, per_round, ok = flat([r["rss_bytes"] - m for r, m in zip(rounds, memos)],
                                          warmup, bound_mib, slope_mib)
        v.update(rest_max_rise_mib=up, rest_max_drop_mib=down, rest_slope_mib_per_round=per_round,
                 rest_flat=ok, memos_last_mib=memos[-1] / MIB,
                 memos_growth_mib=(memos[-1] - memos[warmup - 1]) / MIB)
        held = [m + sum(owner(r, n) for n in BUDGETED) for r, m in zip(rounds, memos)]
        _, up, down, per_round, ok = flat([r["rss_bytes"] - h for r, h in zip(rounds, held)],
                                          warmup, bound_mib, slope_mib)
        in_budget, why = within_budgets(rounds, budgets or {})
        v.update(unbudgeted_max_rise_mib=up, unbudgeted_max_drop_mib=down,
                 unbudgeted_slope_mib_per_round=per_round, owners_within_budgets=in_budget,
                 budget_problem=why, unbudgeted_flat=ok and in_budget)
    quota = max((r.get("disk_quota_bytes") or 0) for r in rounds)
    store = [(r.get("disk_records_bytes") or 0) + (r.get("disk_index_bytes") or 0) for r in rounds]
    v.update(disk_quota_bytes=quota, disk_footprint_max_bytes=max(store),
             cache_dir_max_bytes=max(r["cache_dir_file_bytes"] for r in rounds),
             disk_within_quota=quota > 0 and max(store) <= quota
             and max(r["cache_dir_file_bytes"] for r in rounds) <= quota)
    v["holds"] = (bool(v["rss_flat"] or v.get("rest_flat") or v.get("unbudgeted_flat"))
                  and v["disk_within_quota"])
    return v


def owner_names(rounds):
    names = set()
    for r in rounds:
        names.update(r.get("owners", {}))
    return sorted(names)


def mb(v):
    return "" if v is None else f"{v / MIB:.1f}"


def table(rounds):
    owners = owner_names(rounds)
    head = (["round", "s", "RSS", "KV+compute resident", "heap in use", "heap free",
             "heap mapped", "arenas"]
            + owners + ["disk records", "disk index", "cache dir files", "quota"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    for r in rounds:
        row = [str(r["round"]), f'{r.get("seconds", 0):.0f}', mb(r["rss_bytes"]),
               mb(r.get("large_mappings_resident_bytes")), mb(r.get("heap_in_use_bytes")), mb(r.get("heap_free_bytes")),
               mb(r.get("heap_mapped_bytes")), str(r.get("heap_arenas") or "")]
        row += [mb(r.get("owners", {}).get(o)) for o in owners]
        row += [mb(r.get("disk_records_bytes")), mb(r.get("disk_index_bytes")),
                mb(r["cache_dir_file_bytes"]), mb(r.get("disk_quota_bytes"))]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def chart(rounds, key, label, width=50):
    """One text bar per round, scaled from the smallest value to the largest."""
    vals = [r[key] for r in rounds]
    lo, hi = min(vals), max(vals)
    span = max(hi - lo, 1)
    out = [f"{label} (MiB; bars from {lo / MIB:.1f} to {hi / MIB:.1f})", "```"]
    for r, v in zip(rounds, vals):
        out.append(f"{r['round']:>3} {v / MIB:8.1f} " + "#" * (1 + int((v - lo) * (width - 1) / span)))
    out.append("```")
    return "\n".join(out)


def markdown(rounds, v, title, command):
    lines = [f"# {title}", ""]
    if command:
        lines += [f"Run: `{command}`", ""]
    lines += ["Sizes in MiB, after each round once the disk tier's write-behind settled. "
              "`heap mapped` counts llama.cpp's large buffers (KV cache, compute) at their full "
              "size, touched or not; RSS counts only the touched pages, and `KV+compute "
              "resident` is the touched part of those mappings (over 100 MiB each). Owners: "
              "`prefixd_memory_bytes`.", "",
              table(rounds), "", chart(rounds, "rss_bytes", "RSS"), "",
              chart(rounds, "cache_dir_file_bytes", "cache dir files"), "", "## Verdict", ""]
    if v.get("rss_flat") is None:
        lines.append(f"- RSS: {v['reason']}")
    else:
        lines.append(
            f"- RSS after the {v['warmup_rounds']} warm-up round(s): {v['rss_after_warmup_mib']:.1f} MiB; "
            f"later rounds rise at most {v['rss_max_rise_mib']:.1f} MiB and drop at most "
            f"{v['rss_max_drop_mib']:.1f} MiB (bound {v['bound_mib']} MiB), slope "
            f"{v['rss_slope_mib_per_round']:+.2f} MiB a round (bound {v['slope_bound_mib']}): "
            + ("**flat**" if v["rss_flat"] else "**not flat**"))
        lines.append(
            f"- RSS less the memos (render_memo + token_memo, {v['memos_last_mib']:.1f} MiB at the "
            f"end, +{v['memos_growth_mib']:.1f} MiB after the warm-up, filling toward their "
            f"documented caps): rise at most {v['rest_max_rise_mib']:.1f} MiB, drop at most "
            f"{v['rest_max_drop_mib']:.1f} MiB, slope {v['rest_slope_mib_per_round']:+.2f} MiB a "
            f"round: " + ("**flat**" if v["rest_flat"] else "**not flat**"))
        budgets = ("every round within its budget" if v["owners_within_budgets"]
                   else v["budget_problem"])
        lines.append(
            f"- RSS less the owners a budget bounds (the memos, ram_tier within --ram-budget, "
            f"buffer_pool within its limit: {budgets}): rise at most "
            f"{v['unbudgeted_max_rise_mib']:.1f} MiB, drop at most "
            f"{v['unbudgeted_max_drop_mib']:.1f} MiB, slope "
            f"{v['unbudgeted_slope_mib_per_round']:+.2f} MiB a round: "
            + ("**flat**" if v["unbudgeted_flat"] else "**not flat**"))
    lines.append(
        f"- Disk: the tier's files at most {v['disk_footprint_max_bytes'] / MIB:.1f} MiB, the cache dir's "
        f"{v['cache_dir_max_bytes'] / MIB:.1f} MiB, quota {v['disk_quota_bytes'] / MIB:.1f} MiB: "
        + ("**within**" if v["disk_within_quota"] else "**over**"))
    return "\n".join(lines) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rounds")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--bound-mib", type=float, default=16)
    ap.add_argument("--slope-mib", type=float, default=1)
    ap.add_argument("--ram-budget-mib", type=float, default=0)
    ap.add_argument("--pool-limit-mib", type=float, default=0)
    ap.add_argument("--title", default="Soak")
    ap.add_argument("--command", default="")
    ap.add_argument("--md")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    rounds = load(args.rounds)
    budgets = {"ram_budget_bytes": int(args.ram_budget_mib * MIB),
               "buffer_pool_limit_bytes": int(args.pool_limit_mib * MIB)}
    v = verdict(rounds, args.warmup, args.bound_mib, args.slope_mib, budgets)
    md = markdown(rounds, v, args.title, args.command)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"title": args.title, "command": args.command, "verdict": v,
                       "rounds": rounds}, f, indent=1)
    sys.stdout.write(md)
    return 0 if v["holds"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
