#!/usr/bin/env bash
# Chart of a long-session report's TSV (prefixd bench --long-report --tsv): TTFT and time
# outside the model per request against the context length, both servers.
# Usage: bench/long_session_chart.sh REPORT.tsv OUT.png "title"
set -euo pipefail
tsv="$1" png="$2" title="$3"
labels="$(head -1 "$tsv")"
a="$(echo "$labels" | awk -F'\t' '{sub("ttft_s_", "", $2); print $2}')"
b="$(echo "$labels" | awk -F'\t' '{sub("ttft_s_", "", $3); print $3}')"
gnuplot <<GP
set terminal pngcairo size 1000,800 font ",10"
set output "$png"
set multiplot layout 2,1 title "$title"
set grid
set key top left
set xlabel "prompt tokens (context)"
set format x "%.0s%c"
set ylabel "TTFT (s)"
plot "$tsv" using 1:2 with linespoints pt 7 ps 0.6 lc rgb "#1f77b4" title "$a", \
     "" using 1:3 with linespoints pt 7 ps 0.6 lc rgb "#ff7f0e" title "$b"
set ylabel "time outside the model (ms)"
plot "$tsv" using 1:4 with linespoints pt 7 ps 0.6 lc rgb "#1f77b4" title "$a", \
     "" using 1:5 with linespoints pt 7 ps 0.6 lc rgb "#ff7f0e" title "$b"
unset multiplot
GP
